//! Evaluation: axes, node tests, predicates, operators and the comparison rules of §3.4.

use std::cell::OnceCell;
use std::time::{Duration, SystemTime};

use super::functions::{self, Func};
use super::parser::{Arith, Axis, Cmp, Expr, Start, Step, Test};
use super::{parse_number, sort_nodes, Context, NodeRef, Value, XPathError};
use crate::xml::{Doc, Kind, NodeId};

/// The context of one (sub)expression: node, position and size.
#[derive(Clone, Copy)]
pub(super) struct Focus<'n> {
    pub node: Option<&'n NodeRef>,
    pub pos: usize,
    pub size: usize,
}

impl<'n> Focus<'n> {
    /// The context node, or a type error naming what needed it.
    pub(super) fn node(&self, what: &str) -> Result<&'n NodeRef, XPathError> {
        self.node
            .ok_or_else(|| XPathError::Type(format!("{what} needs a context node")))
    }
}

/// One evaluation: the caller's context, and the clock read once so that every
/// `current-dateTime()` of an expression agrees.
pub(super) struct Eval<'c> {
    cx: &'c dyn Context,
    now: OnceCell<Duration>,
}

pub(super) fn evaluate(
    expr: &Expr,
    cx: &dyn Context,
    node: Option<&NodeRef>,
) -> Result<Value, XPathError> {
    let ev = Eval {
        cx,
        now: OnceCell::new(),
    };
    ev.expr(
        expr,
        Focus {
            node,
            pos: 1,
            size: 1,
        },
    )
}

impl Eval<'_> {
    /// Time since the Unix epoch, the same for the whole evaluation.
    pub(super) fn now(&self) -> Duration {
        *self.now.get_or_init(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
        })
    }

    fn expr(&self, e: &Expr, f: Focus<'_>) -> Result<Value, XPathError> {
        Ok(match e {
            Expr::Or(l, r) => {
                Value::Boolean(self.expr(l, f)?.to_bool() || self.expr(r, f)?.to_bool())
            }
            Expr::And(l, r) => {
                Value::Boolean(self.expr(l, f)?.to_bool() && self.expr(r, f)?.to_bool())
            }
            Expr::Compare(op, l, r) => {
                Value::Boolean(compare(*op, &self.expr(l, f)?, &self.expr(r, f)?))
            }
            Expr::Arith(op, l, r) => {
                let (a, b) = (self.expr(l, f)?.to_number(), self.expr(r, f)?.to_number());
                Value::Number(match op {
                    Arith::Add => a + b,
                    Arith::Sub => a - b,
                    Arith::Mul => a * b,
                    Arith::Div => a / b,
                    // Rust's % truncates like XPath's mod: 5 mod -2 = 1, -5 mod 2 = -1.
                    Arith::Mod => a % b,
                })
            }
            Expr::Neg(e) => Value::Number(-self.expr(e, f)?.to_number()),
            Expr::Union(l, r) => {
                let mut nodes = self.nodes(l, f, "each operand of '|'")?;
                nodes.extend(self.nodes(r, f, "each operand of '|'")?);
                sort_nodes(&mut nodes);
                Value::NodeSet(nodes)
            }
            Expr::Literal(s) => Value::String(s.clone()),
            Expr::Number(n) => Value::Number(*n),
            Expr::Var(name) => match self.cx.variable(name)? {
                Value::NodeSet(mut nodes) => {
                    sort_nodes(&mut nodes);
                    Value::NodeSet(nodes)
                }
                v => v,
            },
            Expr::Call(func, args) => {
                let args = args
                    .iter()
                    .map(|a| self.expr(a, f))
                    .collect::<Result<Vec<_>, _>>()?;
                match func {
                    Func::Core(c) => functions::call(*c, args, f, self)?,
                    Func::Cast(c) => functions::cast(*c, args)?,
                    Func::Ext(name) => self.cx.function(name, args)?,
                }
            }
            Expr::Filter(primary, preds) => {
                let nodes = self.nodes(primary, f, "a predicate")?;
                Value::NodeSet(self.filter(preds, nodes)?)
            }
            Expr::Path(start, steps) => {
                let mut nodes = match start {
                    Start::Root => {
                        let n = f.node("a path starting with '/'")?;
                        vec![NodeRef::root(n.doc.clone())]
                    }
                    Start::Context => vec![f.node("a relative location path")?.clone()],
                    Start::Expr(e) => self.nodes(e, f, "a location step")?,
                };
                for step in steps {
                    nodes = self.step(step, &nodes)?;
                }
                Value::NodeSet(nodes)
            }
        })
    }

    /// Evaluates an expression that must give a node-set (`what` applies to it).
    fn nodes(&self, e: &Expr, f: Focus<'_>, what: &str) -> Result<Vec<NodeRef>, XPathError> {
        match self.expr(e, f)? {
            Value::NodeSet(n) => Ok(n),
            v => Err(XPathError::Type(format!(
                "{what} needs a node-set, not {}",
                describe(&v)
            ))),
        }
    }

    /// One location step from every node of `input`; the result in document order.
    fn step(&self, step: &Step, input: &[NodeRef]) -> Result<Vec<NodeRef>, XPathError> {
        let mut out = Vec::new();
        let mut ids = Vec::new();
        for n in input {
            ids.clear();
            axis_nodes(&n.doc, n.id, step.axis, &mut ids);
            let candidates: Vec<NodeRef> = ids
                .iter()
                .filter(|id| matches(&n.doc, **id, &step.test, step.axis))
                .map(|id| NodeRef::new(n.doc.clone(), *id))
                .collect();
            out.extend(self.filter(&step.preds, candidates)?);
        }
        // From one node, an axis gives distinct nodes in (reverse) document order already.
        if input.len() > 1 {
            sort_nodes(&mut out);
        } else if step.axis.is_reverse() {
            out.reverse();
        }
        Ok(out)
    }

    /// Applies predicates in turn; `nodes` are in the order positions count in.
    fn filter(&self, preds: &[Expr], mut nodes: Vec<NodeRef>) -> Result<Vec<NodeRef>, XPathError> {
        for p in preds {
            let size = nodes.len();
            let mut kept = Vec::with_capacity(size);
            for (i, n) in nodes.iter().enumerate() {
                let focus = Focus {
                    node: Some(n),
                    pos: i + 1,
                    size,
                };
                let keep = match self.expr(p, focus)? {
                    Value::Number(x) => x == (i + 1) as f64,
                    v => v.to_bool(),
                };
                if keep {
                    kept.push(n.clone());
                }
            }
            nodes = kept;
        }
        Ok(nodes)
    }
}

/// How a value reads in a type error.
pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::NodeSet(_) => "a node-set".to_string(),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {}", super::format_number(*n)),
        Value::String(s) => format!("the string '{s}'"),
    }
}

fn is_attribute(doc: &Doc, id: NodeId) -> bool {
    matches!(doc.kind(id), Kind::Attribute { .. })
}

/// Descendants of `id` in document order (attributes excluded).
fn descendants(doc: &Doc, id: NodeId, out: &mut Vec<NodeId>) {
    let mut stack: Vec<NodeId> = doc.children(id).iter().rev().copied().collect();
    while let Some(n) = stack.pop() {
        out.push(n);
        stack.extend(doc.children(n).iter().rev());
    }
}

/// `id`'s siblings before and after it (none for attributes and detached nodes).
fn siblings(doc: &Doc, id: NodeId) -> (&[NodeId], &[NodeId]) {
    if is_attribute(doc, id) {
        return (&[], &[]);
    }
    let Some(parent) = doc.parent(id) else {
        return (&[], &[]);
    };
    let all = doc.children(parent);
    match all.iter().position(|c| *c == id) {
        Some(pos) => (&all[..pos], &all[pos + 1..]),
        None => (&[], &[]),
    }
}

/// The nodes on `axis` from `id`, in proximity order (reverse document order for reverse
/// axes), before any node test.
fn axis_nodes(doc: &Doc, id: NodeId, axis: Axis, out: &mut Vec<NodeId>) {
    match axis {
        Axis::Child => out.extend(doc.children(id)),
        Axis::Descendant => descendants(doc, id, out),
        Axis::DescendantOrSelf => {
            out.push(id);
            descendants(doc, id, out);
        }
        Axis::Parent => out.extend(doc.parent(id)),
        Axis::Ancestor | Axis::AncestorOrSelf => {
            if axis == Axis::AncestorOrSelf {
                out.push(id);
            }
            let mut cur = doc.parent(id);
            while let Some(p) = cur {
                out.push(p);
                cur = doc.parent(p);
            }
        }
        Axis::FollowingSibling => out.extend(siblings(doc, id).1),
        Axis::PrecedingSibling => out.extend(siblings(doc, id).0.iter().rev()),
        Axis::Following => {
            let mut cur = id;
            if is_attribute(doc, id) {
                // An element's content follows its attributes.
                let Some(p) = doc.parent(id) else { return };
                descendants(doc, p, out);
                cur = p;
            }
            loop {
                for s in siblings(doc, cur).1 {
                    out.push(*s);
                    descendants(doc, *s, out);
                }
                match doc.parent(cur) {
                    Some(p) => cur = p,
                    None => break,
                }
            }
        }
        Axis::Preceding => {
            // An attribute's element is its ancestor, so it precedes what its element does.
            let mut cur = if is_attribute(doc, id) {
                match doc.parent(id) {
                    Some(p) => p,
                    None => return,
                }
            } else {
                id
            };
            loop {
                // Siblings nearer the node come later in document order: collect each level
                // in document order, then reverse it.
                let mark = out.len();
                for s in siblings(doc, cur).0 {
                    out.push(*s);
                    descendants(doc, *s, out);
                }
                out[mark..].reverse();
                match doc.parent(cur) {
                    Some(p) => cur = p,
                    None => break,
                }
            }
        }
        Axis::Attribute => out.extend(doc.attributes(id)),
        Axis::SelfNode => out.push(id),
    }
}

fn matches(doc: &Doc, id: NodeId, test: &Test, axis: Axis) -> bool {
    let kind = doc.kind(id);
    let principal = || match kind {
        Kind::Attribute { name, .. } if axis == Axis::Attribute => Some(name),
        Kind::Element { name, .. } if axis != Axis::Attribute => Some(name),
        _ => None,
    };
    match test {
        Test::Node => true,
        Test::Text => matches!(kind, Kind::Text(_)),
        Test::Comment => matches!(kind, Kind::Comment(_)),
        Test::Pi(target) => match kind {
            Kind::Pi { target: t, .. } => target.as_ref().is_none_or(|want| want == t),
            _ => false,
        },
        Test::Principal => principal().is_some(),
        Test::NsPrincipal(ns) => principal().is_some_and(|n| n.ns == *ns),
        Test::Name(ns, local) => principal().is_some_and(|n| n.is(ns, local)),
    }
}

/// `a op b` by §3.4: node-sets compare existentially, through their nodes' string-values.
pub(super) fn compare(op: Cmp, a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::NodeSet(x), Value::NodeSet(y)) => {
            let ys: Vec<Value> = y.iter().map(|n| Value::String(n.string_value())).collect();
            x.iter().any(|n| {
                let xs = Value::String(n.string_value());
                ys.iter().any(|ys| atomic(op, &xs, ys))
            })
        }
        (Value::NodeSet(x), other) => compare_set(op, x, other),
        (other, Value::NodeSet(y)) => compare_set(op.flip(), y, other),
        (a, b) => atomic(op, a, b),
    }
}

/// `set op other` where other is not a node-set.
fn compare_set(op: Cmp, set: &[NodeRef], other: &Value) -> bool {
    match other {
        Value::Boolean(_) => atomic(op, &Value::Boolean(!set.is_empty()), other),
        Value::Number(n) => set
            .iter()
            .any(|x| numbers(op, parse_number(&x.string_value()), *n)),
        _ => set
            .iter()
            .any(|x| atomic(op, &Value::String(x.string_value()), other)),
    }
}

/// Two values, neither a node-set.
fn atomic(op: Cmp, a: &Value, b: &Value) -> bool {
    let equal = match op {
        Cmp::Eq | Cmp::Ne => {
            if matches!(a, Value::Boolean(_)) || matches!(b, Value::Boolean(_)) {
                a.to_bool() == b.to_bool()
            } else if matches!(a, Value::Number(_)) || matches!(b, Value::Number(_)) {
                a.to_number() == b.to_number()
            } else {
                a.to_string_value() == b.to_string_value()
            }
        }
        _ => return numbers(op, a.to_number(), b.to_number()),
    };
    (op == Cmp::Eq) == equal
}

fn numbers(op: Cmp, a: f64, b: f64) -> bool {
    match op {
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
    }
}
