//! The fast interpreter: the jq programs integrations write (paths, object and array
//! construction, string interpolation, arithmetic, comparisons, `if`, `reduce`, `as`
//! bindings, `def`s without recursion and the common built-ins) compiled from jaq's own
//! syntax tree into a small term tree that runs directly on [`V`] values read from the bytes.
//!
//! It gives exactly jaq's output or gives up: a program outside the subset is not compiled
//! (the whole program runs on jaq), and a run that meets anything it is not sure to do as jaq
//! does (an error of any kind, a value count other than one where one is expected, a number
//! beyond 64 bits, a comparison of arrays…) stops with [`Bail`] and is run again on jaq, whose
//! result and errors are then the answer. Programs have no side effects, so a second run is
//! always safe.

use std::cmp::Ordering;
use std::rc::Rc;

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Def, Pattern, Term as Ast};
use jaq_core::ops::{Cmp, Math};
use jaq_core::path::{Opt, Part};

use crate::value::{self, arr, insert, num_cmp, num_op, obj, write, Num, Rules, Str, MAX_DEPTH, V};

/// Why a run stops early.
#[derive(Debug)]
pub(crate) enum Bail {
    /// The run must be done by jaq.
    Jaq,
    /// The run fails here and must not go to jaq: jaq would exhaust memory (it aborts the
    /// process when a string is repeated a huge number of times).
    Error(String),
}

/// A value a program built, or the error that it would nest deeper than jq values may here.
fn built(v: Option<V<'_>>) -> Result<V<'_>, Bail> {
    v.ok_or_else(|| {
        Bail::Error(format!(
            "the program built a value nested deeper than {MAX_DEPTH} levels"
        ))
    })
}

/// The largest string `string * number` may build (jaq has no limit).
const MAX_REPEAT: usize = 16 << 20;

type R = Result<(), Bail>;

/// A literal of the program.
#[derive(Debug)]
enum Lit {
    Null,
    Bool(bool),
    Int(isize),
    Dec(String),
    Str(String),
}

#[derive(Debug)]
enum Part2 {
    Lit(String),
    Term(T),
}

#[derive(Debug)]
enum Key {
    Lit(String),
    Term(T),
}

#[derive(Debug)]
enum PathPart {
    Index(T),
    Iter,
}

#[derive(Debug, Clone, Copy)]
enum Builtin {
    Length,
    ToString,
    ToJson,
    ToNumber,
    Downcase,
    Upcase,
    Floor,
    Ceil,
    Round,
    Type,
    Keys,
    ToEntries,
    Split,
    Join,
    LtrimStr,
    RtrimStr,
    StartsWith,
    EndsWith,
    Has,
}

/// A compiled term.
#[derive(Debug)]
enum T {
    Id,
    Empty,
    /// Always gives up (`error`): jaq raises the error.
    Fail,
    Lit(Lit),
    Interp(Vec<Part2>),
    Arr(Option<Box<T>>),
    Obj(Vec<(Key, T)>),
    Neg(Box<T>),
    Pipe(Box<T>, Box<T>),
    Bind(Box<T>, usize, Box<T>),
    Comma(Box<T>, Box<T>),
    Alt(Box<T>, Box<T>),
    And(Box<T>, Box<T>),
    Or(Box<T>, Box<T>),
    Math(u8, Box<T>, Box<T>),
    Cmp(Cmp, Box<T>, Box<T>),
    Var(usize),
    Reduce(Box<T>, usize, Box<T>, Box<T>),
    If(Box<T>, Box<T>, Box<T>),
    Path(Box<T>, Vec<(PathPart, bool)>),
    Call(Builtin, Vec<T>),
}

/// A program compiled for the fast interpreter.
#[derive(Debug)]
pub(crate) struct Fast {
    main: T,
    /// Slots for variables: the globals first, then one per binding site.
    slots: usize,
    globals: usize,
}

/// Why a program is not compiled for the fast interpreter.
pub(crate) type Unsupported = String;

type Scope<'s, 'p> = Option<Rc<Entry<'s, 'p>>>;

struct Entry<'s, 'p> {
    kind: Kind<'s, 'p>,
    next: Scope<'s, 'p>,
}

enum Kind<'s, 'p> {
    Var(&'s str, usize),
    Def(&'p Def<&'s str, Ast<&'s str>>),
    /// A filter argument: its term, compiled in the caller's scope.
    Filter(&'s str, &'p Ast<&'s str>, Scope<'s, 'p>),
}

fn push<'s, 'p>(kind: Kind<'s, 'p>, next: &Scope<'s, 'p>) -> Scope<'s, 'p> {
    Some(Rc::new(Entry {
        kind,
        next: next.clone(),
    }))
}

/// How deep calls to `def`s are inlined before the program is left to jaq (recursion).
const MAX_INLINE: usize = 24;

struct Compiler {
    slots: usize,
    depth: usize,
}

/// Compiles `source` (already accepted by jaq) with the global variables `vars`.
pub(crate) fn compile(source: &str, vars: &[&str]) -> Result<Fast, Unsupported> {
    let parsed = jaq_core::load::parse(source, |p| Ok((p.defs()?, p.term()?)))
        .ok_or_else(|| "its modules or syntax".to_owned())?;
    let (defs, term) = parsed;
    let names: Vec<String> = vars.iter().map(|v| format!("${v}")).collect();
    let mut scope: Scope = None;
    for (i, name) in names.iter().enumerate() {
        scope = push(Kind::Var(name, i), &scope);
    }
    for d in &defs {
        scope = push(Kind::Def(d), &scope);
    }
    let mut c = Compiler {
        slots: vars.len(),
        depth: 0,
    };
    let main = c.term(&term, &scope)?;
    Ok(Fast {
        main,
        slots: c.slots,
        globals: vars.len(),
    })
}

fn boxed(t: T) -> Box<T> {
    Box::new(t)
}

fn iter_of(t: T) -> T {
    T::Path(boxed(t), vec![(PathPart::Iter, false)])
}

impl Compiler {
    fn slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }

    fn term<'s, 'p>(
        &mut self,
        t: &'p Ast<&'s str>,
        scope: &Scope<'s, 'p>,
    ) -> Result<T, Unsupported> {
        Ok(match t {
            Ast::Id => T::Id,
            Ast::Num(n) => T::Lit(match n.parse::<isize>() {
                Ok(i) => Lit::Int(i),
                Err(_) if n.bytes().all(|b| b.is_ascii_digit()) => {
                    return Err("an integer literal beyond 64 bits".into())
                }
                Err(_) => Lit::Dec((*n).to_owned()),
            }),
            Ast::Str(None, parts) => {
                let mut out = Vec::new();
                for p in parts {
                    match p {
                        StrPart::Str(s) => out.push(Part2::Lit((*s).to_owned())),
                        StrPart::Char(c) => out.push(Part2::Lit(c.to_string())),
                        StrPart::Term(t) => out.push(Part2::Term(self.term(t, scope)?)),
                    }
                }
                match out.as_slice() {
                    [] => T::Lit(Lit::Str(String::new())),
                    [Part2::Lit(_)] => match out.pop() {
                        Some(Part2::Lit(s)) => T::Lit(Lit::Str(s)),
                        _ => unreachable!(),
                    },
                    _ => T::Interp(out),
                }
            }
            Ast::Str(Some(f), _) => return Err(format!("the format {f}")),
            Ast::Arr(None) => T::Arr(None),
            Ast::Arr(Some(t)) => T::Arr(Some(boxed(self.term(t, scope)?))),
            Ast::Obj(entries) => {
                let mut out = Vec::new();
                for (k, v) in entries {
                    out.push(match (k, v) {
                        (Ast::Var(x), None) => (Key::Lit(x[1..].to_owned()), self.term(k, scope)?),
                        (k, None) => {
                            let key = self.key(k, scope)?;
                            let index = self.term(k, scope)?;
                            (
                                key,
                                T::Path(boxed(T::Id), vec![(PathPart::Index(index), false)]),
                            )
                        }
                        (k, Some(v)) => (self.key(k, scope)?, self.term(v, scope)?),
                    });
                }
                T::Obj(out)
            }
            Ast::Neg(t) => T::Neg(boxed(self.term(t, scope)?)),
            Ast::BinOp(l, op, r) => match op {
                BinaryOp::Pipe(None) => {
                    T::Pipe(boxed(self.term(l, scope)?), boxed(self.term(r, scope)?))
                }
                BinaryOp::Pipe(Some(Pattern::Var(x))) => {
                    let src = self.term(l, scope)?;
                    let slot = self.slot();
                    let inner = push(Kind::Var(x, slot), scope);
                    T::Bind(boxed(src), slot, boxed(self.term(r, &inner)?))
                }
                BinaryOp::Pipe(Some(_)) => return Err("destructuring patterns".into()),
                BinaryOp::Comma => {
                    T::Comma(boxed(self.term(l, scope)?), boxed(self.term(r, scope)?))
                }
                BinaryOp::Alt => T::Alt(boxed(self.term(l, scope)?), boxed(self.term(r, scope)?)),
                BinaryOp::And => T::And(boxed(self.term(l, scope)?), boxed(self.term(r, scope)?)),
                BinaryOp::Or => T::Or(boxed(self.term(l, scope)?), boxed(self.term(r, scope)?)),
                BinaryOp::Math(m) => {
                    let op = match m {
                        Math::Add => b'+',
                        Math::Sub => b'-',
                        Math::Mul => b'*',
                        Math::Div => b'/',
                        Math::Rem => b'%',
                    };
                    T::Math(op, boxed(self.term(l, scope)?), boxed(self.term(r, scope)?))
                }
                BinaryOp::Cmp(c) => {
                    T::Cmp(*c, boxed(self.term(l, scope)?), boxed(self.term(r, scope)?))
                }
                _ => return Err("assignments and updates".into()),
            },
            Ast::Fold(kind, src, Pattern::Var(x), args) if *kind == "reduce" => {
                let [init, update] = args.as_slice() else {
                    return Err("reduce without two arguments".into());
                };
                let src = self.term(src, scope)?;
                let init = self.term(init, scope)?;
                let slot = self.slot();
                let inner = push(Kind::Var(x, slot), scope);
                let update = self.term(update, &inner)?;
                T::Reduce(boxed(src), slot, boxed(init), boxed(update))
            }
            Ast::Fold(kind, ..) => return Err((*kind).to_owned()),
            Ast::IfThenElse(branches, otherwise) => {
                let mut out = match otherwise {
                    Some(e) => self.term(e, scope)?,
                    None => T::Id,
                };
                for (cond, then) in branches.iter().rev() {
                    out = T::If(
                        boxed(self.term(cond, scope)?),
                        boxed(self.term(then, scope)?),
                        boxed(out),
                    );
                }
                out
            }
            Ast::Def(defs, body) => {
                let mut inner = scope.clone();
                for d in defs {
                    inner = push(Kind::Def(d), &inner);
                }
                self.term(body, &inner)?
            }
            Ast::Call(name, args) => self.call(name, args, scope)?,
            Ast::Var(x) => {
                let mut s = scope.clone();
                loop {
                    let Some(e) = s else {
                        return Err(format!("the variable {x}"));
                    };
                    if let Kind::Var(n, slot) = e.kind {
                        if n == *x {
                            break T::Var(slot);
                        }
                    }
                    s = e.next.clone();
                }
            }
            Ast::Path(base, path) => {
                let base = self.term(base, scope)?;
                let mut parts = Vec::new();
                for (part, opt) in &path.0 {
                    let optional = matches!(opt, Opt::Optional);
                    parts.push(match part {
                        Part::Index(i) => (PathPart::Index(self.term(i, scope)?), optional),
                        Part::Range(None, None) => (PathPart::Iter, optional),
                        Part::Range(..) => return Err("slices".into()),
                    });
                }
                T::Path(boxed(base), parts)
            }
            Ast::Recurse => return Err("`..`".into()),
            Ast::Label(..) | Ast::Break(_) => return Err("labels".into()),
            Ast::TryCatch(..) => return Err("try".into()),
        })
    }

    /// An object key: a literal string, or a term that must give a string.
    fn key<'s, 'p>(
        &mut self,
        k: &'p Ast<&'s str>,
        scope: &Scope<'s, 'p>,
    ) -> Result<Key, Unsupported> {
        Ok(match self.term(k, scope)? {
            T::Lit(Lit::Str(s)) => Key::Lit(s),
            t => Key::Term(t),
        })
    }

    fn call<'s, 'p>(
        &mut self,
        name: &'s str,
        args: &'p [Ast<&'s str>],
        scope: &Scope<'s, 'p>,
    ) -> Result<T, Unsupported> {
        // The program's own definitions and filter arguments first, innermost first.
        let mut s = scope.clone();
        while let Some(e) = s {
            match &e.kind {
                Kind::Def(d) if d.name == name && d.args.len() == args.len() => {
                    return self.inline(d, args, scope, &e.next);
                }
                Kind::Filter(n, t, caller) if *n == name && args.is_empty() => {
                    return self.nested(|c| c.term(t, caller));
                }
                _ => {}
            }
            s = e.next.clone();
        }
        let one = |c: &mut Compiler, i: usize| c.term(&args[i], scope);
        Ok(match (name, args.len()) {
            ("empty", 0) => T::Empty,
            ("error", 0 | 1) => T::Fail,
            ("null", 0) => T::Lit(Lit::Null),
            ("true", 0) => T::Lit(Lit::Bool(true)),
            ("false", 0) => T::Lit(Lit::Bool(false)),
            ("not", 0) => T::If(
                boxed(T::Id),
                boxed(T::Lit(Lit::Bool(false))),
                boxed(T::Lit(Lit::Bool(true))),
            ),
            ("select", 1) => T::If(boxed(one(self, 0)?), boxed(T::Id), boxed(T::Empty)),
            ("values", 0) => T::If(
                boxed(T::Cmp(Cmp::Ne, boxed(T::Id), boxed(T::Lit(Lit::Null)))),
                boxed(T::Id),
                boxed(T::Empty),
            ),
            ("map", 1) => T::Arr(Some(boxed(T::Pipe(
                boxed(iter_of(T::Id)),
                boxed(one(self, 0)?),
            )))),
            ("add", 0) => {
                let slot = self.slot();
                T::Reduce(
                    boxed(iter_of(T::Id)),
                    slot,
                    boxed(T::Lit(Lit::Null)),
                    boxed(T::Math(b'+', boxed(T::Id), boxed(T::Var(slot)))),
                )
            }
            ("first", 0) => T::Path(
                boxed(T::Id),
                vec![(PathPart::Index(T::Lit(Lit::Int(0))), false)],
            ),
            ("last", 0) => T::Path(
                boxed(T::Id),
                vec![(PathPart::Index(T::Lit(Lit::Int(-1))), false)],
            ),
            ("abs", 0) => T::If(
                boxed(T::Cmp(Cmp::Lt, boxed(T::Id), boxed(T::Lit(Lit::Int(0))))),
                boxed(T::Neg(boxed(T::Id))),
                boxed(T::Id),
            ),
            ("length", 0) => T::Call(Builtin::Length, Vec::new()),
            ("tostring", 0) => T::Call(Builtin::ToString, Vec::new()),
            ("tojson", 0) => T::Call(Builtin::ToJson, Vec::new()),
            ("tonumber", 0) => T::Call(Builtin::ToNumber, Vec::new()),
            ("ascii_downcase", 0) => T::Call(Builtin::Downcase, Vec::new()),
            ("ascii_upcase", 0) => T::Call(Builtin::Upcase, Vec::new()),
            ("floor", 0) => T::Call(Builtin::Floor, Vec::new()),
            ("ceil", 0) => T::Call(Builtin::Ceil, Vec::new()),
            ("round", 0) => T::Call(Builtin::Round, Vec::new()),
            ("type", 0) => T::Call(Builtin::Type, Vec::new()),
            ("keys", 0) => T::Call(Builtin::Keys, Vec::new()),
            ("to_entries", 0) => T::Call(Builtin::ToEntries, Vec::new()),
            ("split", 1) => T::Call(Builtin::Split, vec![one(self, 0)?]),
            ("join", 1) => T::Call(Builtin::Join, vec![one(self, 0)?]),
            ("ltrimstr", 1) => T::Call(Builtin::LtrimStr, vec![one(self, 0)?]),
            ("rtrimstr", 1) => T::Call(Builtin::RtrimStr, vec![one(self, 0)?]),
            ("startswith", 1) => T::Call(Builtin::StartsWith, vec![one(self, 0)?]),
            ("endswith", 1) => T::Call(Builtin::EndsWith, vec![one(self, 0)?]),
            ("has", 1) => T::Call(Builtin::Has, vec![one(self, 0)?]),
            _ => return Err(format!("the function {name}/{}", args.len())),
        })
    }

    fn nested(
        &mut self,
        f: impl FnOnce(&mut Compiler) -> Result<T, Unsupported>,
    ) -> Result<T, Unsupported> {
        self.depth += 1;
        if self.depth > MAX_INLINE {
            return Err("recursion".into());
        }
        let t = f(self);
        self.depth -= 1;
        t
    }

    /// A call to the program's own `def`, inlined: its body in the scope it was defined in
    /// (and itself), with its arguments bound.
    fn inline<'s, 'p>(
        &mut self,
        d: &'p Def<&'s str, Ast<&'s str>>,
        args: &'p [Ast<&'s str>],
        caller: &Scope<'s, 'p>,
        def_scope: &Scope<'s, 'p>,
    ) -> Result<T, Unsupported> {
        self.nested(|c| {
            let mut scope = Some(Rc::new(Entry {
                kind: Kind::Def(d),
                next: def_scope.clone(),
            }));
            // `$x` arguments: `arg as $x | body`, bound outermost first.
            let mut binds = Vec::new();
            for (name, arg) in d.args.iter().zip(args) {
                if name.starts_with('$') {
                    let value = c.term(arg, caller)?;
                    let slot = c.slot();
                    scope = push(Kind::Var(name, slot), &scope);
                    binds.push((value, slot));
                } else {
                    scope = push(Kind::Filter(name, arg, caller.clone()), &scope);
                }
            }
            let mut body = c.term(&d.body, &scope)?;
            for (value, slot) in binds.into_iter().rev() {
                body = T::Bind(boxed(value), slot, boxed(body));
            }
            Ok(body)
        })
    }
}

type Env<'a> = Vec<V<'a>>;
type Out<'o, 'a> = dyn FnMut(V<'a>, &mut Env<'a>) -> R + 'o;

fn lit<'a>(l: &'a Lit) -> V<'a> {
    match l {
        Lit::Null => V::Null,
        Lit::Bool(b) => V::Bool(*b),
        Lit::Int(i) => V::Num(Num::Int(*i)),
        Lit::Dec(d) => V::Num(Num::Dec(Str::Borrowed(d))),
        Lit::Str(s) => V::Str(Str::Borrowed(s)),
    }
}

/// The type rank of jaq's order between values of different types.
fn rank(v: &V<'_>) -> u8 {
    match v {
        V::Null => 0,
        V::Bool(_) => 1,
        V::Num(_) => 2,
        V::Str(_) => 3,
        V::Arr(..) => 4,
        V::Obj(..) => 5,
    }
}

fn compare(l: &V<'_>, r: &V<'_>) -> Result<Ordering, Bail> {
    Ok(match (l, r) {
        (V::Null, V::Null) => Ordering::Equal,
        (V::Bool(x), V::Bool(y)) => x.cmp(y),
        (V::Num(x), V::Num(y)) => num_cmp(x, y).ok_or(Bail::Jaq)?,
        (V::Str(x), V::Str(y)) => x.as_str().as_bytes().cmp(y.as_str().as_bytes()),
        (V::Arr(..), V::Arr(..)) | (V::Obj(..), V::Obj(..)) => return Err(Bail::Jaq),
        (l, r) => rank(l).cmp(&rank(r)),
    })
}

fn json_text(v: &V<'_>) -> String {
    let mut out = Vec::new();
    write(&mut out, v);
    String::from_utf8(out).unwrap_or_default()
}

/// `tostring` (and string interpolation): strings as they are, anything else as JSON.
fn into_string<'a>(v: V<'a>) -> V<'a> {
    match v {
        V::Str(_) => v,
        v => V::string(json_text(&v)),
    }
}

fn math<'a>(op: u8, l: V<'a>, r: V<'a>) -> Result<V<'a>, Bail> {
    Ok(match (op, l, r) {
        (b'+', V::Null, x) | (b'+', x, V::Null) => x,
        (_, V::Num(x), V::Num(y)) => V::Num(num_op(op, &x, &y).ok_or(Bail::Jaq)?),
        (b'+', V::Str(x), V::Str(y)) => V::string([x.as_str(), y.as_str()].concat()),
        (b'+', V::Arr(x, _), V::Arr(y, _)) => {
            let mut items = Rc::unwrap_or_clone(x);
            items.extend(y.iter().cloned());
            built(arr(items))?
        }
        (b'+', V::Obj(x, _), V::Obj(y, _)) => {
            let mut fields = Rc::unwrap_or_clone(x);
            for (k, v) in y.iter() {
                insert(&mut fields, k.clone(), v.clone());
            }
            built(obj(fields))?
        }
        (b'/', V::Str(x), V::Str(y)) => split(x.as_str(), y.as_str()),
        (b'*', V::Str(s), V::Num(n)) | (b'*', V::Num(n), V::Str(s)) => match n {
            Num::Int(i) if i <= 0 => V::Null,
            Num::Big(b) if b.as_str().starts_with('-') => V::Null,
            Num::Int(_) | Num::Big(_) => {
                let times = match n {
                    Num::Int(i) => i.unsigned_abs(),
                    _ => usize::MAX,
                };
                let len = s.as_str().len().saturating_mul(times);
                if len > MAX_REPEAT {
                    return Err(Bail::Error(format!(
                        "repeating a string of {} bytes {} times makes more than {MAX_REPEAT} bytes",
                        s.as_str().len(),
                        match n {
                            Num::Big(b) => b.as_str().to_owned(),
                            _ => times.to_string(),
                        }
                    )));
                }
                V::string(s.as_str().repeat(times))
            }
            _ => return Err(Bail::Jaq),
        },
        _ => return Err(Bail::Jaq),
    })
}

/// jaq's string split: nothing for an empty string, characters for an empty separator.
fn split<'a>(s: &str, sep: &str) -> V<'a> {
    let items: Vec<V<'a>> = if s.is_empty() {
        Vec::new()
    } else if sep.is_empty() {
        s.chars().map(|c| V::string(c.to_string())).collect()
    } else {
        s.split(sep).map(|p| V::string(p.to_owned())).collect()
    };
    V::Arr(Rc::new(items), 1)
}

/// jaq's rounding: integers unchanged, other numbers rounded to an integer when in range.
fn rounded<'a>(v: &V<'a>, f: fn(f64) -> f64) -> Result<V<'a>, Bail> {
    let V::Num(n) = v else { return Err(Bail::Jaq) };
    if let Num::Int(_) | Num::Big(_) = n {
        return Ok(v.clone());
    }
    let x = f(n.as_f64());
    if !x.is_finite() {
        return Ok(V::Num(Num::Float(x)));
    }
    if isize::MIN as f64 <= x && x <= isize::MAX as f64 {
        Ok(V::Num(Num::Int(x as isize)))
    } else {
        Err(Bail::Jaq)
    }
}

impl Fast {
    /// Runs the program on `input` with the global variables as JSON texts; the one output
    /// as compact JSON, or [`Bail`].
    pub(crate) fn run(
        &self,
        input: &[u8],
        vars: &[&[u8]],
        rules: Option<Rules>,
    ) -> Result<Vec<u8>, Bail> {
        let text = std::str::from_utf8(input).map_err(|_| Bail::Jaq)?;
        let input = match rules {
            Some(rules) => value::parse_with(text, rules),
            None => value::parse(text),
        }
        .ok_or(Bail::Jaq)?;
        let mut env: Env = vec![V::Null; self.slots];
        for (i, slot) in env.iter_mut().enumerate().take(self.globals) {
            let raw = vars.get(i).copied().unwrap_or(b"null");
            let text = std::str::from_utf8(raw).map_err(|_| Bail::Jaq)?;
            *slot = value::parse(text).ok_or(Bail::Jaq)?;
        }
        let v = self.one(&self.main, &input, &mut env)?;
        let mut out = Vec::with_capacity(256);
        write(&mut out, &v);
        Ok(out)
    }

    /// The one value `t` gives, or [`Bail`] when it gives none, several or fails.
    fn one<'a>(&'a self, t: &'a T, input: &V<'a>, env: &mut Env<'a>) -> Result<V<'a>, Bail> {
        Ok(match t {
            T::Id => input.clone(),
            T::Lit(l) => lit(l),
            T::Var(slot) => env[*slot].clone(),
            T::Fail | T::Empty => return Err(Bail::Jaq),
            T::Interp(parts) => {
                let mut s = String::new();
                for p in parts {
                    match p {
                        Part2::Lit(l) => s.push_str(l),
                        Part2::Term(t) => match self.one(t, input, env)? {
                            V::Str(x) => s.push_str(x.as_str()),
                            v => {
                                let mut out = Vec::new();
                                write(&mut out, &v);
                                s.push_str(std::str::from_utf8(&out).map_err(|_| Bail::Jaq)?);
                            }
                        },
                    }
                }
                V::string(s)
            }
            T::Arr(None) => V::Arr(Rc::new(Vec::new()), 1),
            T::Arr(Some(t)) => {
                let mut items = Vec::new();
                self.each(t, input, env, &mut |v, _| {
                    items.push(v);
                    Ok(())
                })?;
                built(arr(items))?
            }
            T::Obj(entries) => {
                let mut fields: Vec<(Str<'a>, V<'a>)> = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    let key = match k {
                        Key::Lit(s) => Str::Borrowed(s.as_str()),
                        Key::Term(t) => match self.one(t, input, env)? {
                            V::Str(s) => s,
                            _ => return Err(Bail::Jaq),
                        },
                    };
                    let value = self.one(v, input, env)?;
                    insert(&mut fields, key, value);
                }
                built(obj(fields))?
            }
            T::Neg(t) => match self.one(t, input, env)? {
                V::Num(Num::Int(i)) => V::Num(
                    i.checked_neg()
                        .map_or_else(|| value::big(-(i as i128)), Num::Int),
                ),
                V::Num(Num::Float(f)) => V::Num(Num::Float(-f)),
                V::Num(Num::Dec(d)) => {
                    let d = d.as_str();
                    V::Num(Num::Dec(Str::Owned(match d.strip_prefix('-') {
                        Some(p) => p.into(),
                        None => format!("-{d}").into(),
                    })))
                }
                _ => return Err(Bail::Jaq),
            },
            T::Pipe(l, r) => {
                let v = self.one(l, input, env)?;
                self.one(r, &v, env)?
            }
            T::Bind(src, slot, body) => {
                let v = self.one(src, input, env)?;
                let old = std::mem::replace(&mut env[*slot], v);
                let out = self.one(body, input, env);
                env[*slot] = old;
                out?
            }
            T::And(l, r) => {
                if !self.one(l, input, env)?.truthy() {
                    V::Bool(false)
                } else {
                    V::Bool(self.one(r, input, env)?.truthy())
                }
            }
            T::Or(l, r) => {
                if self.one(l, input, env)?.truthy() {
                    V::Bool(true)
                } else {
                    V::Bool(self.one(r, input, env)?.truthy())
                }
            }
            T::Math(op, l, r) => {
                let (x, y) = (self.one(l, input, env)?, self.one(r, input, env)?);
                math(*op, x, y)?
            }
            T::Cmp(c, l, r) => {
                let (x, y) = (self.one(l, input, env)?, self.one(r, input, env)?);
                let o = compare(&x, &y)?;
                V::Bool(match c {
                    Cmp::Eq => o == Ordering::Equal,
                    Cmp::Ne => o != Ordering::Equal,
                    Cmp::Lt => o == Ordering::Less,
                    Cmp::Le => o != Ordering::Greater,
                    Cmp::Gt => o == Ordering::Greater,
                    Cmp::Ge => o != Ordering::Less,
                })
            }
            T::Reduce(src, slot, init, update) => {
                let mut acc = Some(self.one(init, input, env)?);
                self.each(src, input, env, &mut |x, env| {
                    let old = std::mem::replace(&mut env[*slot], x);
                    let cur = acc.take().ok_or(Bail::Jaq)?;
                    let next = self.one(update, &cur, env);
                    env[*slot] = old;
                    acc = Some(next?);
                    Ok(())
                })?;
                acc.ok_or(Bail::Jaq)?
            }
            T::If(c, then, otherwise) => {
                if self.one(c, input, env)?.truthy() {
                    self.one(then, input, env)?
                } else {
                    self.one(otherwise, input, env)?
                }
            }
            T::Path(base, parts)
                if parts
                    .iter()
                    .all(|(p, opt)| !opt && matches!(p, PathPart::Index(_))) =>
            {
                let mut v = self.one(base, input, env)?;
                for (p, _) in parts {
                    let PathPart::Index(i) = p else {
                        unreachable!()
                    };
                    let key = self.one(i, input, env)?;
                    v = index(&v, &key)?.ok_or(Bail::Jaq)?;
                }
                v
            }
            T::Call(b, args) => {
                let arg = match args.first() {
                    Some(a) => Some(self.one(a, input, env)?),
                    None => None,
                };
                builtin(*b, input, arg)?
            }
            T::Comma(..) | T::Alt(..) | T::Path(..) => {
                let mut got = None;
                self.each(t, input, env, &mut |v, _| {
                    if got.is_some() {
                        return Err(Bail::Jaq);
                    }
                    got = Some(v);
                    Ok(())
                })?;
                got.ok_or(Bail::Jaq)?
            }
        })
    }

    /// Every value `t` gives, in order, to `out`.
    fn each<'a>(&'a self, t: &'a T, input: &V<'a>, env: &mut Env<'a>, out: &mut Out<'_, 'a>) -> R {
        match t {
            T::Empty => Ok(()),
            T::Comma(l, r) => {
                self.each(l, input, env, out)?;
                self.each(r, input, env, out)
            }
            T::Pipe(l, r) => self.each(l, input, env, &mut |v, env| self.each(r, &v, env, out)),
            T::Bind(src, slot, body) => self.each(src, input, env, &mut |v, env| {
                let old = std::mem::replace(&mut env[*slot], v);
                let r = self.each(body, input, env, out);
                env[*slot] = old;
                r
            }),
            T::If(c, then, otherwise) => self.each(c, input, env, &mut |v, env| {
                let branch = if v.truthy() { then } else { otherwise };
                self.each(branch, input, env, out)
            }),
            T::Alt(l, r) => {
                let mut kept = Vec::new();
                self.each(l, input, env, &mut |v, _| {
                    if v.truthy() {
                        kept.push(v);
                    }
                    Ok(())
                })?;
                if kept.is_empty() {
                    self.each(r, input, env, out)
                } else {
                    kept.into_iter().try_for_each(|v| out(v, env))
                }
            }
            T::Path(base, parts) => self.each(base, input, env, &mut |v, env| {
                self.path(parts, input, v, env, out)
            }),
            _ => {
                let v = self.one(t, input, env)?;
                out(v, env)
            }
        }
    }

    /// Applies `parts` to `v` (index terms see the path's own input, `root`).
    fn path<'a>(
        &'a self,
        parts: &'a [(PathPart, bool)],
        root: &V<'a>,
        v: V<'a>,
        env: &mut Env<'a>,
        out: &mut Out<'_, 'a>,
    ) -> R {
        let Some(((part, optional), rest)) = parts.split_first() else {
            return out(v, env);
        };
        match part {
            PathPart::Index(i) => {
                let key = self.one(i, root, env)?;
                match index(&v, &key)? {
                    Some(x) => self.path(rest, root, x, env, out),
                    None if *optional => Ok(()),
                    None => Err(Bail::Jaq),
                }
            }
            PathPart::Iter => match v {
                V::Arr(items, _) => {
                    for x in items.iter() {
                        self.path(rest, root, x.clone(), env, out)?;
                    }
                    Ok(())
                }
                V::Obj(fields, _) => {
                    for (_, x) in fields.iter() {
                        self.path(rest, root, x.clone(), env, out)?;
                    }
                    Ok(())
                }
                _ if *optional => Ok(()),
                _ => Err(Bail::Jaq),
            },
        }
    }
}

/// `v[key]`: `None` where jaq raises an error (a `?` path then gives nothing).
fn index<'a>(v: &V<'a>, key: &V<'a>) -> Result<Option<V<'a>>, Bail> {
    Ok(match (v, key) {
        (V::Null, _) => Some(V::Null),
        (V::Obj(..), V::Str(k)) => Some(v.get(k.as_str()).cloned().unwrap_or(V::Null)),
        (V::Arr(items, _), V::Num(Num::Int(i))) => {
            let at = if *i < 0 {
                items.len().checked_sub(i.unsigned_abs())
            } else {
                Some(*i as usize)
            };
            Some(at.and_then(|at| items.get(at)).cloned().unwrap_or(V::Null))
        }
        (V::Obj(..) | V::Arr(..), _) => return Err(Bail::Jaq),
        _ => None,
    })
}

fn builtin<'a>(b: Builtin, v: &V<'a>, arg: Option<V<'a>>) -> Result<V<'a>, Bail> {
    let both_str = |arg: &Option<V<'a>>| -> Result<(String, String), Bail> {
        match (v, arg) {
            (V::Str(s), Some(V::Str(a))) => Ok((s.as_str().to_owned(), a.as_str().to_owned())),
            _ => Err(Bail::Jaq),
        }
    };
    Ok(match b {
        Builtin::Length => V::Num(match v {
            V::Null => Num::Int(0),
            V::Num(Num::Int(i)) => Num::Int(i.checked_abs().ok_or(Bail::Jaq)?),
            V::Num(Num::Big(_)) => return Err(Bail::Jaq),
            V::Num(n) => Num::Float(n.as_f64().abs()),
            V::Str(s) => Num::Int(s.as_str().chars().count() as isize),
            V::Arr(a, _) => Num::Int(a.len() as isize),
            V::Obj(o, _) => Num::Int(o.len() as isize),
            V::Bool(_) => return Err(Bail::Jaq),
        }),
        Builtin::ToString => into_string(v.clone()),
        Builtin::ToJson => V::string(json_text(v)),
        Builtin::ToNumber => match v {
            V::Num(_) => v.clone(),
            V::Str(s) => V::Num(match value::parse_number(s.as_str()).ok_or(Bail::Jaq)? {
                Num::Int(i) => Num::Int(i),
                Num::Float(f) => Num::Float(f),
                Num::Dec(d) => Num::Dec(Str::Owned(d.as_str().into())),
                Num::Big(d) => Num::Big(Str::Owned(d.as_str().into())),
            }),
            _ => return Err(Bail::Jaq),
        },
        Builtin::Downcase | Builtin::Upcase => match v {
            V::Str(s) => V::string(if matches!(b, Builtin::Downcase) {
                s.as_str().to_ascii_lowercase()
            } else {
                s.as_str().to_ascii_uppercase()
            }),
            _ => return Err(Bail::Jaq),
        },
        Builtin::Floor => rounded(v, f64::floor)?,
        Builtin::Ceil => rounded(v, f64::ceil)?,
        Builtin::Round => rounded(v, f64::round)?,
        Builtin::Type => V::Str(Str::Borrowed(match v {
            V::Null => "null",
            V::Bool(_) => "boolean",
            V::Num(_) => "number",
            V::Str(_) => "string",
            V::Arr(..) => "array",
            V::Obj(..) => "object",
        })),
        Builtin::Keys => match v {
            V::Obj(o, _) => {
                let mut keys: Vec<Str<'a>> = o.iter().map(|(k, _)| k.clone()).collect();
                keys.sort_by(|x, y| x.as_str().as_bytes().cmp(y.as_str().as_bytes()));
                V::Arr(Rc::new(keys.into_iter().map(V::Str).collect()), 1)
            }
            V::Arr(a, _) => V::Arr(
                Rc::new((0..a.len()).map(|i| V::Num(Num::Int(i as isize))).collect()),
                1,
            ),
            _ => return Err(Bail::Jaq),
        },
        Builtin::ToEntries => match v {
            V::Obj(o, _) => built(arr(o
                .iter()
                .map(|(k, x)| {
                    built(obj(vec![
                        (Str::Borrowed("key"), V::Str(k.clone())),
                        (Str::Borrowed("value"), x.clone()),
                    ]))
                })
                .collect::<Result<_, _>>()?))?,
            _ => return Err(Bail::Jaq),
        },
        Builtin::Split => {
            let (s, sep) = both_str(&arg)?;
            split(&s, &sep)
        }
        Builtin::Join => match (v, &arg) {
            (V::Arr(items, _), Some(sep @ (V::Str(_) | V::Null))) => {
                let sep = match sep {
                    V::Str(s) => s.as_str(),
                    _ => "",
                };
                let mut s = String::new();
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        s.push_str(sep);
                    }
                    match into_string(item.clone()) {
                        V::Str(x) => s.push_str(x.as_str()),
                        _ => return Err(Bail::Jaq),
                    }
                }
                V::string(s)
            }
            _ => return Err(Bail::Jaq),
        },
        Builtin::LtrimStr | Builtin::RtrimStr => {
            let (s, fix) = both_str(&arg)?;
            let cut = if matches!(b, Builtin::LtrimStr) {
                s.strip_prefix(fix.as_str())
            } else {
                s.strip_suffix(fix.as_str())
            };
            match cut {
                Some(c) => V::string(c.to_owned()),
                None => v.clone(),
            }
        }
        Builtin::StartsWith | Builtin::EndsWith => {
            let (s, fix) = both_str(&arg)?;
            V::Bool(if matches!(b, Builtin::StartsWith) {
                s.starts_with(fix.as_str())
            } else {
                s.ends_with(fix.as_str())
            })
        }
        Builtin::Has => match (v, &arg) {
            (V::Obj(..), Some(V::Str(k))) => V::Bool(v.get(k.as_str()).is_some()),
            _ => return Err(Bail::Jaq),
        },
    })
}
