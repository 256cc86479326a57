//! A compiled process: activities with every name resolved, every expression compiled.
//!
//! Variables and correlation sets live in frames: the process has one, and so does each
//! `scope`, each `forEach` iteration and each `catch` with a fault variable. A reference is
//! resolved when the process is compiled into (frames up, index), so running never looks a
//! name up.

use std::path::PathBuf;
use std::sync::Arc;

use crate::wsdl::Definitions;
use crate::xml::{Doc, Name};
use crate::xpath::XPath;

/// WS-BPEL 2.0 executable processes.
pub const BPEL_NS: &str = "http://docs.oasis-open.org/wsbpel/2.0/process/executable";
/// The 2004/03 draft namespace, accepted as an alias.
pub const BPEL_2004_NS: &str = "http://schemas.xmlsoap.org/ws/2004/03/business-process/";
/// XML Schema.
pub const XSD_NS: &str = "http://www.w3.org/2001/XMLSchema";

/// What a variable holds.
#[derive(Clone, Debug, PartialEq)]
pub enum VarKind {
    /// A WSDL message: `<message><part>…</part>…</message>`.
    Message(Name),
    /// A global element: the element itself.
    Element(Name),
    /// A schema type: a wrapper element holding the value (text or content).
    Type(Name),
}

impl VarKind {
    /// A simple XML Schema type (its value is text).
    pub fn is_simple(&self) -> bool {
        matches!(self, VarKind::Type(t) if t.ns == XSD_NS)
    }
}

/// A declared variable.
#[derive(Clone, Debug)]
pub struct VarDecl {
    pub name: String,
    pub kind: VarKind,
    /// Inline initialisation.
    pub init: Option<From>,
}

/// A declared correlation set.
#[derive(Clone, Debug)]
pub struct CorrDecl {
    pub name: String,
    pub properties: Vec<Name>,
    /// Unique in the process (the routing key's first half).
    pub id: usize,
}

/// What a frame declares.
#[derive(Clone, Debug, Default)]
pub struct FrameDef {
    pub vars: Vec<VarDecl>,
    pub corrs: Vec<CorrDecl>,
}

/// A resolved variable: `hops` frames up, slot `index`.
#[derive(Clone, Debug)]
pub struct VarRef {
    pub name: String,
    pub hops: u16,
    pub index: u16,
    pub kind: VarKind,
}

/// A resolved correlation set.
#[derive(Clone, Debug)]
pub struct CorrRef {
    pub name: String,
    pub hops: u16,
    pub index: u16,
    pub id: usize,
    pub properties: Vec<Name>,
}

/// `initiate` of a correlation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initiate {
    Yes,
    Join,
    No,
}

/// `pattern` of an invoke's correlation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Request,
    Response,
    RequestResponse,
}

/// A correlation used by a messaging activity.
#[derive(Clone, Debug)]
pub struct CorrUse {
    pub set: CorrRef,
    pub initiate: Initiate,
    pub pattern: Option<Pattern>,
}

/// A compiled expression and the variables it reads (name as written → variable, part).
#[derive(Clone, Debug)]
pub struct Expr {
    pub xpath: XPath,
    pub vars: Vec<(String, VarRef, Option<String>)>,
    /// Namespaces in scope where it was written (for QName strings such as property names).
    pub ns: Vec<(String, String)>,
    pub line: u32,
}

impl Expr {
    /// The namespace `prefix` meant where the expression was written.
    pub fn ns_for(&self, prefix: &str) -> Option<&str> {
        self.ns
            .iter()
            .find(|(p, _)| p == prefix)
            .map(|(_, u)| u.as_str())
    }
}

/// A partner link of the process.
#[derive(Clone, Debug)]
pub struct PartnerLinkDef {
    pub name: String,
    pub my_port_type: Option<Name>,
    pub partner_port_type: Option<Name>,
}

/// The source of a copy.
#[derive(Clone, Debug)]
pub enum From {
    /// Literal content (the children of the document's root element).
    Literal(Arc<Doc>),
    /// A variable, optionally a part of it and a query relative to that.
    Var {
        var: VarRef,
        part: Option<String>,
        query: Option<Expr>,
    },
    /// A property of a variable.
    Property { var: VarRef, property: Name },
    /// An expression.
    Expr(Expr),
}

/// The target of a copy.
#[derive(Clone, Debug)]
pub enum To {
    Var {
        var: VarRef,
        part: Option<String>,
        query: Option<Expr>,
    },
    Property {
        var: VarRef,
        property: Name,
    },
    /// A path expression (`$var.part/a/b`).
    Expr(Expr),
}

/// One `copy` of an `assign`.
#[derive(Clone, Debug)]
pub struct Copy {
    pub from: From,
    pub to: To,
    pub keep_src_element_name: bool,
    pub ignore_missing_from_data: bool,
    pub line: u32,
}

/// Fault handlers of a scope.
#[derive(Clone, Debug, Default)]
pub struct FaultHandlers {
    pub catches: Vec<Catch>,
    pub catch_all: Option<Box<Activity>>,
}

/// A `catch`.
#[derive(Clone, Debug)]
pub struct Catch {
    pub fault: Option<Name>,
    /// The fault variable's frame (one variable) and what it must be.
    pub var: Option<(FrameDef, VarKind)>,
    pub activity: Box<Activity>,
}

/// `wait` / `onAlarm` timing.
#[derive(Clone, Debug)]
pub enum Timer {
    For(Expr),
    Until(Expr),
}

/// A receive (or an `onMessage`).
#[derive(Clone, Debug)]
pub struct ReceiveDef {
    pub partner_link: usize,
    pub operation: String,
    pub variable: Option<VarRef>,
    pub correlations: Vec<CorrUse>,
    pub create_instance: bool,
    pub message_exchange: Option<String>,
    /// The input message type.
    pub message_type: Name,
    pub one_way: bool,
}

/// An `invoke`.
#[derive(Clone, Debug)]
pub struct InvokeDef {
    pub partner_link: usize,
    pub port_type: Name,
    pub operation: String,
    pub input: Option<VarRef>,
    pub output: Option<VarRef>,
    pub correlations: Vec<CorrUse>,
    pub input_type: Option<Name>,
    pub output_type: Option<Name>,
}

/// A `forEach`.
#[derive(Clone, Debug)]
pub struct ForEachDef {
    pub parallel: bool,
    pub start: Expr,
    pub end: Expr,
    pub completion: Option<(Expr, bool)>,
    /// The child scope; its frame's first variable is the counter.
    pub scope: ScopeDef,
}

/// A `scope` (also the process itself).
#[derive(Clone, Debug)]
pub struct ScopeDef {
    pub frame: FrameDef,
    pub handlers: FaultHandlers,
    pub activity: Box<Activity>,
    pub exit_on_standard_fault: bool,
}

/// A `pick`.
#[derive(Clone, Debug)]
pub struct PickDef {
    pub create_instance: bool,
    pub on_message: Vec<(ReceiveDef, Activity)>,
    pub on_alarm: Vec<(Timer, Activity)>,
}

/// What an activity does.
#[derive(Clone, Debug)]
pub enum Act {
    Empty,
    Sequence(Vec<Activity>),
    Receive(Box<ReceiveDef>),
    Reply {
        partner_link: usize,
        operation: String,
        variable: Option<VarRef>,
        fault: Option<Name>,
        message_exchange: Option<String>,
    },
    Invoke(Box<InvokeDef>),
    Assign(Vec<Copy>),
    If(Vec<(Expr, Activity)>, Option<Box<Activity>>),
    While(Expr, Box<Activity>),
    RepeatUntil(Box<Activity>, Expr),
    ForEach(Box<ForEachDef>),
    Flow(Vec<Activity>),
    Scope(Box<ScopeDef>),
    Throw {
        fault: Name,
        variable: Option<VarRef>,
    },
    Rethrow,
    Exit,
    Wait(Timer),
    Pick(Box<PickDef>),
}

/// An activity with where it came from.
#[derive(Clone, Debug)]
pub struct Activity {
    pub act: Act,
    pub name: Option<String>,
    pub line: u32,
}

/// A compiled process.
#[derive(Debug)]
pub struct Process {
    pub name: Name,
    pub file: PathBuf,
    pub defs: Definitions,
    pub partner_links: Vec<PartnerLinkDef>,
    pub root: ScopeDef,
    /// Every message-receiving point: (partner link, operation, receive).
    pub receives: Vec<ReceiveDef>,
}

impl Process {
    /// The index of partner link `name`.
    pub fn partner_link(&self, name: &str) -> Option<usize> {
        self.partner_links.iter().position(|p| p.name == name)
    }
}
