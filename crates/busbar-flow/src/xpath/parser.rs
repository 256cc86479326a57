//! The syntax tree and a recursive-descent parser for the XPath 1.0 grammar.
//!
//! Precedence, loosest first: `or`, `and`, `=` `!=`, `<` `<=` `>` `>=`, `+` `-`, `*` `div`
//! `mod`, unary `-`, `|`. Abbreviations are expanded here (`//` is
//! `/descendant-or-self::node()/`, `.` is `self::node()`, `..` is `parent::node()`, `@` is
//! `attribute::`), and every prefix is resolved, so evaluation only sees namespace URIs.

use super::functions::{self, Func};
use super::lexer::{Tok, Token};
use super::{Env, XPathError};

/// How deeply expressions may nest; bounds the parser's recursion.
const MAX_NESTING: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The operator with its operands swapped: `a < b` is `b > a`.
    pub(super) fn flip(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            op => op,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Axis {
    Ancestor,
    AncestorOrSelf,
    Attribute,
    Child,
    Descendant,
    DescendantOrSelf,
    Following,
    FollowingSibling,
    Parent,
    Preceding,
    PrecedingSibling,
    SelfNode,
}

impl Axis {
    /// Whether proximity runs against document order.
    pub(super) fn is_reverse(self) -> bool {
        matches!(
            self,
            Axis::Ancestor | Axis::AncestorOrSelf | Axis::Preceding | Axis::PrecedingSibling
        )
    }

    fn from_name(name: &str) -> Option<Axis> {
        Some(match name {
            "ancestor" => Axis::Ancestor,
            "ancestor-or-self" => Axis::AncestorOrSelf,
            "attribute" => Axis::Attribute,
            "child" => Axis::Child,
            "descendant" => Axis::Descendant,
            "descendant-or-self" => Axis::DescendantOrSelf,
            "following" => Axis::Following,
            "following-sibling" => Axis::FollowingSibling,
            "parent" => Axis::Parent,
            "preceding" => Axis::Preceding,
            "preceding-sibling" => Axis::PrecedingSibling,
            "self" => Axis::SelfNode,
            _ => return None,
        })
    }
}

/// What a step keeps of the nodes on its axis.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Test {
    /// `node()`
    Node,
    /// `text()`
    Text,
    /// `comment()`
    Comment,
    /// `processing-instruction()`, optionally with a target.
    Pi(Option<String>),
    /// `*`: any node of the axis's principal type.
    Principal,
    /// `p:*`: principal type in namespace.
    NsPrincipal(String),
    /// A name: (namespace URI, local part).
    Name(String, String),
}

#[derive(Clone, Debug)]
pub(super) struct Step {
    pub axis: Axis,
    pub test: Test,
    pub preds: Vec<Expr>,
}

#[derive(Clone, Debug)]
pub(super) enum Start {
    /// `/…`: the document node of the context node.
    Root,
    /// A relative path: the context node.
    Context,
    /// A filter expression followed by `/` or `//`.
    Expr(Box<Expr>),
}

#[derive(Clone, Debug)]
pub(super) enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Compare(Cmp, Box<Expr>, Box<Expr>),
    Arith(Arith, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Union(Box<Expr>, Box<Expr>),
    Literal(String),
    Number(f64),
    Var(String),
    Call(Func, Vec<Expr>),
    /// A primary expression with predicates: `$v[1]`, `(a|b)[last()]`.
    Filter(Box<Expr>, Vec<Expr>),
    Path(Start, Vec<Step>),
}

impl Expr {
    /// A location path, or a path starting at a variable (optionally filtered).
    pub(super) fn is_path(&self) -> bool {
        fn rooted_in_variable(e: &Expr) -> bool {
            match e {
                Expr::Var(_) => true,
                Expr::Filter(inner, _) => rooted_in_variable(inner),
                _ => false,
            }
        }
        match self {
            Expr::Path(Start::Root | Start::Context, _) => true,
            Expr::Path(Start::Expr(e), _) => rooted_in_variable(e),
            e => rooted_in_variable(e),
        }
    }
}

fn node_step(axis: Axis) -> Step {
    Step {
        axis,
        test: Test::Node,
        preds: Vec::new(),
    }
}

struct Parser<'a, 'e> {
    text: &'a str,
    toks: Vec<Token>,
    i: usize,
    env: &'a Env<'e>,
    depth: usize,
    variables: Vec<String>,
}

/// Parses the tokens of `text` into an expression and the variables it names.
pub(super) fn parse(
    text: &str,
    toks: Vec<Token>,
    env: &Env<'_>,
) -> Result<(Expr, Vec<String>), XPathError> {
    let mut p = Parser {
        text,
        toks,
        i: 0,
        env,
        depth: 0,
        variables: Vec::new(),
    };
    if p.toks.is_empty() {
        return Err(p.err("empty expression"));
    }
    let e = p.expr()?;
    if let Some(t) = p.peek() {
        let found = t.describe();
        return Err(p.err(format!(
            "unexpected {found} after the end of the expression"
        )));
    }
    Ok((e, p.variables))
}

impl Parser<'_, '_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.i).map(|t| &t.tok)
    }

    fn at(&self) -> usize {
        self.toks.get(self.i).map_or(self.text.len(), |t| t.at)
    }

    fn err(&self, message: impl Into<String>) -> XPathError {
        XPathError::syntax(self.text, self.at(), message)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Tok) -> Result<(), XPathError> {
        if self.eat(t) {
            return Ok(());
        }
        let found = self.peek().map_or("the end".to_string(), Tok::describe);
        Err(self.err(format!("expected {}, found {found}", t.describe())))
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.i).map(|t| t.tok.clone());
        self.i += 1;
        t
    }

    fn expr(&mut self) -> Result<Expr, XPathError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.err(format!("expression nested deeper than {MAX_NESTING}")));
        }
        let e = self.or();
        self.depth -= 1;
        e
    }

    fn or(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.and()?;
        while self.eat(&Tok::Or) {
            l = Expr::Or(Box::new(l), Box::new(self.and()?));
        }
        Ok(l)
    }

    fn and(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.equality()?;
        while self.eat(&Tok::And) {
            l = Expr::And(Box::new(l), Box::new(self.equality()?));
        }
        Ok(l)
    }

    fn equality(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.relational()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Eq) => Cmp::Eq,
                Some(Tok::Ne) => Cmp::Ne,
                _ => return Ok(l),
            };
            self.i += 1;
            l = Expr::Compare(op, Box::new(l), Box::new(self.relational()?));
        }
    }

    fn relational(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.additive()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Lt) => Cmp::Lt,
                Some(Tok::Le) => Cmp::Le,
                Some(Tok::Gt) => Cmp::Gt,
                Some(Tok::Ge) => Cmp::Ge,
                _ => return Ok(l),
            };
            self.i += 1;
            l = Expr::Compare(op, Box::new(l), Box::new(self.additive()?));
        }
    }

    fn additive(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.multiplicative()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Plus) => Arith::Add,
                Some(Tok::Minus) => Arith::Sub,
                _ => return Ok(l),
            };
            self.i += 1;
            l = Expr::Arith(op, Box::new(l), Box::new(self.multiplicative()?));
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Multiply) => Arith::Mul,
                Some(Tok::Div) => Arith::Div,
                Some(Tok::Mod) => Arith::Mod,
                _ => return Ok(l),
            };
            self.i += 1;
            l = Expr::Arith(op, Box::new(l), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, XPathError> {
        let mut negations = 0usize;
        while self.eat(&Tok::Minus) {
            negations += 1;
        }
        let mut e = self.union()?;
        for _ in 0..negations {
            e = Expr::Neg(Box::new(e));
        }
        Ok(e)
    }

    fn union(&mut self) -> Result<Expr, XPathError> {
        let mut l = self.path()?;
        while self.eat(&Tok::Pipe) {
            l = Expr::Union(Box::new(l), Box::new(self.path()?));
        }
        Ok(l)
    }

    fn starts_step(t: Option<&Tok>) -> bool {
        matches!(
            t,
            Some(
                Tok::Dot
                    | Tok::DotDot
                    | Tok::At
                    | Tok::Axis(_)
                    | Tok::NodeType(_)
                    | Tok::Star
                    | Tok::NsStar(_)
                    | Tok::QName(..)
            )
        )
    }

    fn path(&mut self) -> Result<Expr, XPathError> {
        match self.peek() {
            Some(
                Tok::Var(_) | Tok::LParen | Tok::Literal(_) | Tok::Number(_) | Tok::Function(..),
            ) => {
                let primary = self.filter()?;
                if !matches!(self.peek(), Some(Tok::Slash | Tok::DoubleSlash)) {
                    return Ok(primary);
                }
                let mut steps = Vec::new();
                self.more_steps(&mut steps)?;
                Ok(Expr::Path(Start::Expr(Box::new(primary)), steps))
            }
            Some(Tok::Slash) => {
                self.i += 1;
                let mut steps = Vec::new();
                if Self::starts_step(self.peek()) {
                    self.relative(&mut steps)?;
                }
                Ok(Expr::Path(Start::Root, steps))
            }
            Some(Tok::DoubleSlash) => {
                self.i += 1;
                let mut steps = vec![node_step(Axis::DescendantOrSelf)];
                self.relative(&mut steps)?;
                Ok(Expr::Path(Start::Root, steps))
            }
            t if Self::starts_step(t) => {
                let mut steps = Vec::new();
                self.relative(&mut steps)?;
                Ok(Expr::Path(Start::Context, steps))
            }
            Some(t) => {
                let found = t.describe();
                Err(self.err(format!("expected an expression, found {found}")))
            }
            None => Err(self.err("expected an expression, found the end")),
        }
    }

    /// A step, then any number of `/step` or `//step`.
    fn relative(&mut self, steps: &mut Vec<Step>) -> Result<(), XPathError> {
        steps.push(self.step()?);
        self.more_steps(steps)
    }

    fn more_steps(&mut self, steps: &mut Vec<Step>) -> Result<(), XPathError> {
        loop {
            match self.peek() {
                Some(Tok::Slash) => {}
                Some(Tok::DoubleSlash) => steps.push(node_step(Axis::DescendantOrSelf)),
                _ => return Ok(()),
            }
            self.i += 1;
            steps.push(self.step()?);
        }
    }

    fn step(&mut self) -> Result<Step, XPathError> {
        let axis = match self.peek() {
            Some(Tok::Dot) => {
                self.i += 1;
                return Ok(node_step(Axis::SelfNode));
            }
            Some(Tok::DotDot) => {
                self.i += 1;
                return Ok(node_step(Axis::Parent));
            }
            Some(Tok::At) => {
                self.i += 1;
                Axis::Attribute
            }
            Some(Tok::Axis(name)) => {
                let axis = match Axis::from_name(name) {
                    Some(a) => a,
                    None if name == "namespace" => {
                        return Err(self.err("namespace axis is not supported"))
                    }
                    None => return Err(self.err(format!("unknown axis '{name}'"))),
                };
                self.i += 1;
                self.expect(&Tok::ColonColon)?;
                axis
            }
            _ => Axis::Child,
        };
        let test = self.node_test()?;
        let mut preds = Vec::new();
        while self.eat(&Tok::LBracket) {
            preds.push(self.expr()?);
            self.expect(&Tok::RBracket)?;
        }
        Ok(Step { axis, test, preds })
    }

    fn resolve_prefix(&self, prefix: &str) -> Result<String, XPathError> {
        (self.env.ns)(prefix).ok_or_else(|| XPathError::UnboundPrefix(prefix.to_string()))
    }

    fn node_test(&mut self) -> Result<Test, XPathError> {
        let start = self.i;
        match self.next() {
            Some(Tok::Star) => Ok(Test::Principal),
            Some(Tok::NsStar(p)) => Ok(Test::NsPrincipal(self.resolve_prefix(&p)?)),
            Some(Tok::QName(p, l)) if p.is_empty() => Ok(Test::Name(String::new(), l)),
            Some(Tok::QName(p, l)) => Ok(Test::Name(self.resolve_prefix(&p)?, l)),
            Some(Tok::NodeType(t)) => {
                self.expect(&Tok::LParen)?;
                let test = match t.as_str() {
                    "node" => Test::Node,
                    "text" => Test::Text,
                    "comment" => Test::Comment,
                    _ => match self.peek() {
                        Some(Tok::Literal(l)) => {
                            let target = l.trim().to_string();
                            self.i += 1;
                            Test::Pi(Some(target))
                        }
                        _ => Test::Pi(None),
                    },
                };
                self.expect(&Tok::RParen)?;
                Ok(test)
            }
            t => {
                self.i = start;
                let found = t.map_or("the end".to_string(), |t| t.describe());
                Err(self.err(format!("expected a node test, found {found}")))
            }
        }
    }

    fn filter(&mut self) -> Result<Expr, XPathError> {
        let primary = self.primary()?;
        let mut preds = Vec::new();
        while self.eat(&Tok::LBracket) {
            preds.push(self.expr()?);
            self.expect(&Tok::RBracket)?;
        }
        Ok(if preds.is_empty() {
            primary
        } else {
            Expr::Filter(Box::new(primary), preds)
        })
    }

    fn primary(&mut self) -> Result<Expr, XPathError> {
        let at = self.i;
        match self.next() {
            Some(Tok::Var(v)) => {
                if !self.variables.contains(&v) {
                    self.variables.push(v.clone());
                }
                Ok(Expr::Var(v))
            }
            Some(Tok::Literal(l)) => Ok(Expr::Literal(l)),
            Some(Tok::Number(n)) => Ok(Expr::Number(n)),
            Some(Tok::LParen) => {
                let e = self.expr()?;
                self.expect(&Tok::RParen)?;
                Ok(e)
            }
            Some(Tok::Function(prefix, local)) => {
                self.expect(&Tok::LParen)?;
                let mut args = Vec::new();
                if !self.eat(&Tok::RParen) {
                    loop {
                        args.push(self.expr()?);
                        if self.eat(&Tok::RParen) {
                            break;
                        }
                        self.expect(&Tok::Comma)?;
                    }
                }
                let func = functions::resolve(&prefix, &local, args.len(), self.env).map_err(
                    |e| match e {
                        functions::Unresolved::Error(e) => e,
                        functions::Unresolved::Arity(message) => {
                            XPathError::syntax(self.text, self.toks[at].at, message)
                        }
                    },
                )?;
                Ok(Expr::Call(func, args))
            }
            _ => {
                self.i = at;
                Err(self.err("expected an expression"))
            }
        }
    }
}
