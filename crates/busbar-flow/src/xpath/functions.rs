//! The function library: XPath 1.0's core functions, the XPath 2.0 functions BPEL processes
//! use, and XML Schema constructor casts. Names and arities are checked when compiling.

use super::eval::{describe, Eval, Focus};
use super::{
    first_in_order, format_number, is_xml_space, parse_number, Env, NodeRef, Value, XPathError,
    FN_NS, XS_NS,
};
use crate::xml::{Kind, Name, NodeId, XML_NS};

/// A resolved function name.
#[derive(Clone, Debug)]
pub(super) enum Func {
    Core(Core),
    Cast(Cast),
    /// An extension function, called through the [`super::Context`].
    Ext(Name),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Core {
    Last,
    Position,
    Count,
    Id,
    LocalName,
    NamespaceUri,
    Name,
    String,
    Concat,
    StartsWith,
    Contains,
    SubstringBefore,
    SubstringAfter,
    Substring,
    StringLength,
    NormalizeSpace,
    Translate,
    Boolean,
    Not,
    True,
    False,
    Lang,
    Number,
    Sum,
    Floor,
    Ceiling,
    Round,
    // XPath 2.0
    Abs,
    UpperCase,
    LowerCase,
    EndsWith,
    StringJoin,
    CurrentDateTime,
    CurrentDate,
    CurrentTime,
}

impl Core {
    fn from_name(name: &str) -> Option<Core> {
        use Core::*;
        Some(match name {
            "last" => Last,
            "position" => Position,
            "count" => Count,
            "id" => Id,
            "local-name" => LocalName,
            "namespace-uri" => NamespaceUri,
            "name" => Name,
            "string" => String,
            "concat" => Concat,
            "starts-with" => StartsWith,
            "contains" => Contains,
            "substring-before" => SubstringBefore,
            "substring-after" => SubstringAfter,
            "substring" => Substring,
            "string-length" => StringLength,
            "normalize-space" => NormalizeSpace,
            "translate" => Translate,
            "boolean" => Boolean,
            "not" => Not,
            "true" => True,
            "false" => False,
            "lang" => Lang,
            "number" => Number,
            "sum" => Sum,
            "floor" => Floor,
            "ceiling" => Ceiling,
            "round" => Round,
            "abs" => Abs,
            "upper-case" => UpperCase,
            "lower-case" => LowerCase,
            "ends-with" => EndsWith,
            "string-join" => StringJoin,
            "current-dateTime" => CurrentDateTime,
            "current-date" => CurrentDate,
            "current-time" => CurrentTime,
            _ => return None,
        })
    }

    /// Fewest and most arguments (None: any number).
    fn arity(self) -> (usize, Option<usize>) {
        use Core::*;
        match self {
            Last | Position | True | False | CurrentDateTime | CurrentDate | CurrentTime => {
                (0, Some(0))
            }
            LocalName | NamespaceUri | Name | String | StringLength | NormalizeSpace | Number => {
                (0, Some(1))
            }
            Count | Id | Boolean | Not | Lang | Sum | Floor | Ceiling | Round | Abs | UpperCase
            | LowerCase => (1, Some(1)),
            StartsWith | Contains | SubstringBefore | SubstringAfter | EndsWith | StringJoin => {
                (2, Some(2))
            }
            Substring => (2, Some(3)),
            Translate => (3, Some(3)),
            Concat => (2, None),
        }
    }
}

/// XML Schema constructor functions (`xs:integer('3')`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cast {
    String,
    Boolean,
    Double,
    Float,
    Decimal,
    Integer,
    Int,
    Long,
    Short,
    NonNegativeInteger,
    PositiveInteger,
    DateTime,
    Date,
    Time,
    Duration,
    DayTimeDuration,
    YearMonthDuration,
}

impl Cast {
    fn from_name(name: &str) -> Option<Cast> {
        use Cast::*;
        Some(match name {
            "string" => String,
            "boolean" => Boolean,
            "double" => Double,
            "float" => Float,
            "decimal" => Decimal,
            "integer" => Integer,
            "int" => Int,
            "long" => Long,
            "short" => Short,
            "nonNegativeInteger" => NonNegativeInteger,
            "positiveInteger" => PositiveInteger,
            "dateTime" => DateTime,
            "date" => Date,
            "time" => Time,
            "duration" => Duration,
            "dayTimeDuration" => DayTimeDuration,
            "yearMonthDuration" => YearMonthDuration,
            _ => return None,
        })
    }

    fn type_name(self) -> &'static str {
        use Cast::*;
        match self {
            String => "xs:string",
            Boolean => "xs:boolean",
            Double => "xs:double",
            Float => "xs:float",
            Decimal => "xs:decimal",
            Integer => "xs:integer",
            Int => "xs:int",
            Long => "xs:long",
            Short => "xs:short",
            NonNegativeInteger => "xs:nonNegativeInteger",
            PositiveInteger => "xs:positiveInteger",
            DateTime => "xs:dateTime",
            Date => "xs:date",
            Time => "xs:time",
            Duration => "xs:duration",
            DayTimeDuration => "xs:dayTimeDuration",
            YearMonthDuration => "xs:yearMonthDuration",
        }
    }
}

/// Why a function name did not resolve.
pub(super) enum Unresolved {
    Error(XPathError),
    /// A known function called with the wrong number of arguments (a syntax error there).
    Arity(String),
}

/// Resolves a function name as written (`prefix` empty when none) called with `arity`
/// arguments.
pub(super) fn resolve(
    prefix: &str,
    local: &str,
    arity: usize,
    env: &Env<'_>,
) -> Result<Func, Unresolved> {
    let written = if prefix.is_empty() {
        local.to_string()
    } else {
        format!("{prefix}:{local}")
    };
    let unknown = || Unresolved::Error(XPathError::UnknownFunction(written.clone()));
    let ns = if prefix.is_empty() {
        String::new()
    } else {
        (env.ns)(prefix)
            .ok_or_else(|| Unresolved::Error(XPathError::UnboundPrefix(prefix.to_string())))?
    };
    if ns.is_empty() || ns == FN_NS {
        let core = Core::from_name(local).ok_or_else(unknown)?;
        let (min, max) = core.arity();
        if arity < min || max.is_some_and(|m| arity > m) {
            let expected = match (min, max) {
                (a, Some(b)) if a == b => format!("{a}"),
                (a, Some(b)) => format!("{a} to {b}"),
                (a, None) => format!("at least {a}"),
            };
            return Err(Unresolved::Arity(format!(
                "{written}() takes {expected} argument(s), not {arity}"
            )));
        }
        return Ok(Func::Core(core));
    }
    if ns == XS_NS {
        let cast = Cast::from_name(local).ok_or_else(unknown)?;
        if arity != 1 {
            return Err(Unresolved::Arity(format!(
                "{written}() takes 1 argument, not {arity}"
            )));
        }
        return Ok(Func::Cast(cast));
    }
    let name = Name::new(ns, local).with_prefix(prefix);
    if (env.extension)(&name, arity) {
        Ok(Func::Ext(name))
    } else {
        Err(unknown())
    }
}

fn type_error(message: impl Into<String>) -> XPathError {
    XPathError::Type(message.into())
}

/// The node-set argument of `func`.
fn node_set(v: Value, func: &str) -> Result<Vec<NodeRef>, XPathError> {
    match v {
        Value::NodeSet(n) => Ok(n),
        v => Err(type_error(format!(
            "{func}() needs a node-set, not {}",
            describe(&v)
        ))),
    }
}

/// The node a name function looks at: the first of its argument, or the context node.
fn name_subject(args: Vec<Value>, f: Focus<'_>, func: &str) -> Result<Option<NodeRef>, XPathError> {
    match args.into_iter().next() {
        Some(v) => Ok(first_in_order(&node_set(v, func)?).cloned()),
        None => Ok(Some(f.node(&format!("{func}()"))?.clone())),
    }
}

/// The string argument at `i`, or the context node's string-value when absent.
fn string_or_context(args: &[Value], f: Focus<'_>, func: &str) -> Result<String, XPathError> {
    match args.first() {
        Some(v) => Ok(v.to_string_value()),
        None => Ok(f.node(&format!("{func}()"))?.string_value()),
    }
}

/// XPath `round`: halves go up, -0.5 ≤ x < 0 gives -0, NaN and infinities stay.
pub(super) fn round(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let f = x.floor();
    // x - floor(x) is exact for doubles, unlike x + 0.5.
    let r = if x - f >= 0.5 { f + 1.0 } else { f };
    if r == 0.0 && x.is_sign_negative() {
        -0.0
    } else {
        r
    }
}

/// XPath `substring`: characters at 1-based positions p with round(start) ≤ p <
/// round(start) + round(len), so NaN and infinite bounds select by those comparisons.
fn substring(s: &str, start: f64, len: Option<f64>) -> String {
    let first = round(start);
    let end = len.map_or(f64::INFINITY, |l| first + round(l));
    s.chars()
        .enumerate()
        .filter(|(i, _)| {
            let p = (*i + 1) as f64;
            p >= first && p < end
        })
        .map(|(_, c)| c)
        .collect()
}

fn translate(s: &str, from: &str, to: &str) -> String {
    let from: Vec<char> = from.chars().collect();
    let to: Vec<char> = to.chars().collect();
    s.chars()
        .filter_map(|c| match from.iter().position(|x| *x == c) {
            Some(i) => to.get(i).copied(),
            None => Some(c),
        })
        .collect()
}

fn normalize_space(s: &str) -> String {
    s.split(is_xml_space)
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `node` (or its nearest ancestor with `xml:lang`) is in language `want` or a
/// sub-language of it, ignoring case.
fn lang(node: &NodeRef, want: &str) -> bool {
    let doc = &node.doc;
    let mut cur = Some(node.id);
    while let Some(id) = cur {
        if let Some(l) = doc.attr(id, XML_NS, "lang") {
            let l = l.to_ascii_lowercase();
            let want = want.to_ascii_lowercase();
            return l == want || l.strip_prefix(&want).is_some_and(|r| r.starts_with('-'));
        }
        cur = doc.parent(id);
    }
    false
}

/// `id()`: elements whose `xml:id` is one of the whitespace-separated tokens (documents
/// here have no DTD, so `xml:id` is the only kind of ID they can declare).
fn id(arg: Value, f: Focus<'_>) -> Vec<NodeRef> {
    let (tokens, doc) = match &arg {
        Value::NodeSet(nodes) => (
            nodes
                .iter()
                .map(NodeRef::string_value)
                .collect::<Vec<_>>()
                .join(" "),
            f.node.or(nodes.first()).map(|n| n.doc.clone()),
        ),
        v => (v.to_string_value(), f.node.map(|n| n.doc.clone())),
    };
    let Some(doc) = doc else {
        return Vec::new();
    };
    let wanted: Vec<&str> = tokens
        .split(is_xml_space)
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = Vec::new();
    let mut stack = vec![NodeId::ROOT];
    while let Some(n) = stack.pop() {
        if doc
            .attr(n, XML_NS, "id")
            .is_some_and(|v| wanted.contains(&v.trim()))
        {
            out.push(NodeRef::new(doc.clone(), n));
        }
        stack.extend(doc.children(n).iter().rev());
    }
    out
}

/// Calls a core function on evaluated arguments (arity already checked).
pub(super) fn call(
    func: Core,
    args: Vec<Value>,
    f: Focus<'_>,
    ev: &Eval<'_>,
) -> Result<Value, XPathError> {
    use Value::{Boolean as B, Number as N, String as S};
    let str_arg = |i: usize| args.get(i).map(Value::to_string_value).unwrap_or_default();
    let num_arg = |i: usize| args.get(i).map_or(f64::NAN, Value::to_number);
    Ok(match func {
        Core::Last => N(f.size as f64),
        Core::Position => N(f.pos as f64),
        Core::Count => {
            N(node_set(args.into_iter().next().unwrap_or(B(false)), "count")?.len() as f64)
        }
        Core::Id => {
            let mut nodes = id(args.into_iter().next().unwrap_or(B(false)), f);
            super::sort_nodes(&mut nodes);
            Value::NodeSet(nodes)
        }
        Core::LocalName => S(name_subject(args, f, "local-name")?
            .map(|n| match n.doc.kind(n.id) {
                Kind::Element { name, .. } | Kind::Attribute { name, .. } => name.local.clone(),
                Kind::Pi { target, .. } => target.clone(),
                _ => String::new(),
            })
            .unwrap_or_default()),
        Core::NamespaceUri => S(name_subject(args, f, "namespace-uri")?
            .and_then(|n| n.doc.name(n.id).map(|name| name.ns.clone()))
            .unwrap_or_default()),
        Core::Name => S(name_subject(args, f, "name")?
            .map(|n| match n.doc.kind(n.id) {
                Kind::Element { name, .. } | Kind::Attribute { name, .. } => name.to_string(),
                Kind::Pi { target, .. } => target.clone(),
                _ => String::new(),
            })
            .unwrap_or_default()),
        Core::String => S(string_or_context(&args, f, "string")?),
        Core::Concat => S(args.iter().map(Value::to_string_value).collect()),
        Core::StartsWith => B(str_arg(0).starts_with(&str_arg(1))),
        Core::Contains => B(str_arg(0).contains(&str_arg(1))),
        Core::SubstringBefore => {
            let s = str_arg(0);
            S(s.split_once(&str_arg(1))
                .map(|(b, _)| b.to_string())
                .unwrap_or_default())
        }
        Core::SubstringAfter => {
            let s = str_arg(0);
            S(s.split_once(&str_arg(1))
                .map(|(_, a)| a.to_string())
                .unwrap_or_default())
        }
        Core::Substring => S(substring(
            &str_arg(0),
            num_arg(1),
            (args.len() == 3).then(|| num_arg(2)),
        )),
        Core::StringLength => N(string_or_context(&args, f, "string-length")?
            .chars()
            .count() as f64),
        Core::NormalizeSpace => S(normalize_space(&string_or_context(
            &args,
            f,
            "normalize-space",
        )?)),
        Core::Translate => S(translate(&str_arg(0), &str_arg(1), &str_arg(2))),
        Core::Boolean => B(args.first().is_some_and(Value::to_bool)),
        Core::Not => B(!args.first().is_some_and(Value::to_bool)),
        Core::True => B(true),
        Core::False => B(false),
        Core::Lang => B(lang(f.node("lang()")?, &str_arg(0))),
        Core::Number => N(match args.first() {
            Some(v) => v.to_number(),
            None => parse_number(&f.node("number()")?.string_value()),
        }),
        Core::Sum => N(
            node_set(args.into_iter().next().unwrap_or(B(false)), "sum")?
                .iter()
                .map(|n| parse_number(&n.string_value()))
                .sum(),
        ),
        Core::Floor => N(num_arg(0).floor()),
        Core::Ceiling => N(num_arg(0).ceil()),
        Core::Round => N(round(num_arg(0))),
        Core::Abs => N(num_arg(0).abs()),
        Core::UpperCase => S(str_arg(0).to_uppercase()),
        Core::LowerCase => S(str_arg(0).to_lowercase()),
        Core::EndsWith => B(str_arg(0).ends_with(&str_arg(1))),
        Core::StringJoin => {
            let sep = str_arg(1);
            S(match args.into_iter().next() {
                Some(Value::NodeSet(nodes)) => nodes
                    .iter()
                    .map(NodeRef::string_value)
                    .collect::<Vec<_>>()
                    .join(&sep),
                Some(v) => v.to_string_value(),
                None => String::new(),
            })
        }
        Core::CurrentDateTime => {
            let (date, time) = utc(ev.now());
            S(format!("{date}T{time}Z"))
        }
        Core::CurrentDate => S(format!("{}Z", utc(ev.now()).0)),
        Core::CurrentTime => S(format!("{}Z", utc(ev.now()).1)),
    })
}

/// The UTC date (`YYYY-MM-DD`) and time (`hh:mm:ss.sss`) `since_epoch` after 1970.
pub(super) fn utc(since_epoch: std::time::Duration) -> (String, String) {
    let secs = since_epoch.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = busbar_core::calendar::civil_from_days(days);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!(
            "{:02}:{:02}:{:02}.{:03}",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60,
            since_epoch.subsec_millis()
        ),
    )
}

/// An XML Schema constructor applied to its argument.
pub(super) fn cast(to: Cast, args: Vec<Value>) -> Result<Value, XPathError> {
    let arg = args
        .into_iter()
        .next()
        .unwrap_or(Value::String(String::new()));
    let invalid = |text: &str| type_error(format!("'{text}' is not a valid {}", to.type_name()));
    match to {
        Cast::String => Ok(Value::String(arg.to_string_value())),
        Cast::Boolean => Ok(Value::Boolean(match arg {
            Value::Boolean(b) => b,
            Value::Number(n) => n != 0.0 && !n.is_nan(),
            v => {
                let text = v.to_string_value();
                match text.trim_matches(is_xml_space) {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(invalid(&text)),
                }
            }
        })),
        Cast::Double | Cast::Float | Cast::Decimal => Ok(Value::Number(match arg {
            Value::Number(n) => n,
            Value::Boolean(b) => f64::from(u8::from(b)),
            v => {
                let text = v.to_string_value();
                xs_number(text.trim_matches(is_xml_space), to != Cast::Decimal)
                    .ok_or_else(|| invalid(&text))?
            }
        })),
        Cast::Integer
        | Cast::Int
        | Cast::Long
        | Cast::Short
        | Cast::NonNegativeInteger
        | Cast::PositiveInteger => {
            let n = match arg {
                Value::Number(n) if n.is_finite() => n.trunc(),
                Value::Number(n) => return Err(invalid(&format_number(n))),
                Value::Boolean(b) => f64::from(u8::from(b)),
                v => {
                    let text = v.to_string_value();
                    let t = text.trim_matches(is_xml_space);
                    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
                    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(invalid(&text));
                    }
                    // Sign and digits only: Rust parses every such text.
                    t.parse::<f64>().map_err(|_| invalid(&text))?
                }
            };
            let (min, max) = match to {
                Cast::Int => (f64::from(i32::MIN), f64::from(i32::MAX)),
                Cast::Short => (f64::from(i16::MIN), f64::from(i16::MAX)),
                Cast::Long => (-9_223_372_036_854_775_808.0, 9_223_372_036_854_775_807.0),
                Cast::NonNegativeInteger => (0.0, f64::INFINITY),
                Cast::PositiveInteger => (1.0, f64::INFINITY),
                _ => (f64::NEG_INFINITY, f64::INFINITY),
            };
            if n < min || n > max {
                return Err(type_error(format!(
                    "{} is out of range for {}",
                    format_number(n),
                    to.type_name()
                )));
            }
            Ok(Value::Number(if n == 0.0 { 0.0 } else { n }))
        }
        Cast::DateTime
        | Cast::Date
        | Cast::Time
        | Cast::Duration
        | Cast::DayTimeDuration
        | Cast::YearMonthDuration => {
            let text = arg.to_string_value();
            let t = text.trim_matches(is_xml_space);
            let ok = match to {
                Cast::DateTime => {
                    let mut c = Cursor::new(t);
                    c.date() && c.eat(b'T') && c.time() && c.timezone() && c.done()
                }
                Cast::Date => {
                    let mut c = Cursor::new(t);
                    c.date() && c.timezone() && c.done()
                }
                Cast::Time => {
                    let mut c = Cursor::new(t);
                    c.time() && c.timezone() && c.done()
                }
                Cast::Duration => duration(t, true, true),
                Cast::DayTimeDuration => duration(t, false, true),
                _ => duration(t, true, false),
            };
            if ok {
                Ok(Value::String(t.to_string()))
            } else {
                Err(invalid(&text))
            }
        }
    }
}

/// The XML Schema lexical form of a double (`exponent`) or decimal.
fn xs_number(t: &str, exponent: bool) -> Option<f64> {
    if exponent {
        match t {
            "INF" | "+INF" => return Some(f64::INFINITY),
            "-INF" => return Some(f64::NEG_INFINITY),
            "NaN" => return Some(f64::NAN),
            _ => {}
        }
    }
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(i) if exponent => (&t[..i], Some(&t[i + 1..])),
        _ => (t, None),
    };
    let unsigned = mantissa.strip_prefix(['-', '+']).unwrap_or(mantissa);
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    if let Some(e) = exp {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        if e.is_empty() || !digits(e) {
            return None;
        }
    }
    t.parse().ok()
}

/// A hand-written check of date and time lexical forms.
struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn new(s: &'a str) -> Self {
        Cursor {
            s: s.as_bytes(),
            i: 0,
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.i) == Some(&b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn done(&self) -> bool {
        self.i == self.s.len()
    }

    /// Exactly `n` digits, as a number.
    fn digits(&mut self, n: usize) -> Option<u32> {
        let d = self.s.get(self.i..self.i + n)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.i += n;
        Some(d.iter().fold(0, |v, b| v * 10 + u32::from(b - b'0')))
    }

    /// `-?YYYY-MM-DD` with a real day of that month.
    fn date(&mut self) -> bool {
        self.eat(b'-');
        let start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let year = &self.s[start..self.i];
        if year.len() < 4 || (year.len() > 4 && year[0] == b'0') {
            return false;
        }
        let y: u64 = year.iter().fold(0u64, |v, b| {
            v.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        });
        if !self.eat(b'-') {
            return false;
        }
        let Some(m) = self.digits(2) else {
            return false;
        };
        if !self.eat(b'-') {
            return false;
        }
        let Some(d) = self.digits(2) else {
            return false;
        };
        let leap = y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400));
        let days = match m {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return false,
        };
        (1..=days).contains(&d)
    }

    /// `hh:mm:ss(.s+)?`, `24:00:00` allowed.
    fn time(&mut self) -> bool {
        let (Some(h), true, Some(m), true, Some(s)) = (
            self.digits(2),
            self.eat(b':'),
            self.digits(2),
            self.eat(b':'),
            self.digits(2),
        ) else {
            return false;
        };
        let mut fraction_zero = true;
        if self.eat(b'.') {
            let start = self.i;
            while let Some(b) = self.s.get(self.i).filter(|b| b.is_ascii_digit()) {
                fraction_zero &= *b == b'0';
                self.i += 1;
            }
            if self.i == start {
                return false;
            }
        }
        (h < 24 && m < 60 && s < 60) || (h == 24 && m == 0 && s == 0 && fraction_zero)
    }

    /// Nothing, `Z`, or `±hh:mm` up to 14:00.
    fn timezone(&mut self) -> bool {
        if self.done() || self.eat(b'Z') {
            return true;
        }
        if !(self.eat(b'+') || self.eat(b'-')) {
            return false;
        }
        match (self.digits(2), self.eat(b':'), self.digits(2)) {
            (Some(h), true, Some(m)) => m < 60 && (h < 14 || (h == 14 && m == 0)),
            _ => false,
        }
    }
}

/// `-?PnYnMnDTnHnMnS` with at least one part, `T` only before a time part, seconds the
/// only fraction; `date_parts`/`time_parts` choose which parts are allowed.
fn duration(t: &str, date_parts: bool, time_parts: bool) -> bool {
    let t = t.strip_prefix('-').unwrap_or(t);
    let Some(body) = t.strip_prefix('P') else {
        return false;
    };
    let (date, time) = match body.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (body, None),
    };
    // Each part: digits then its letter, letters in this order.
    let parts = |s: &str, letters: &[u8], fraction_on: Option<u8>| -> Option<usize> {
        let b = s.as_bytes();
        let (mut i, mut next, mut count) = (0, 0, 0);
        while i < b.len() {
            let start = i;
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            let whole = i > start;
            if b.get(i) == Some(&b'.') {
                i += 1;
                let fs = i;
                while b.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                let letter = b.get(i).copied();
                if i == fs || letter.is_none() || letter != fraction_on {
                    return None;
                }
            } else if !whole {
                return None;
            }
            let pos = letters[next..].iter().position(|l| Some(l) == b.get(i))?;
            next += pos + 1;
            i += 1;
            count += 1;
        }
        Some(count)
    };
    let date_letters: &[u8] = match (date_parts, time_parts) {
        (true, true) => b"YMD",
        (true, false) => b"YM",
        _ => b"D",
    };
    let Some(date_count) = parts(date, date_letters, None) else {
        return false;
    };
    let time_count = match time {
        None => 0,
        Some(_) if !time_parts => return false,
        Some(t) => match parts(t, b"HMS", Some(b'S')) {
            Some(n) if n > 0 => n,
            _ => return false,
        },
    };
    date_count + time_count > 0
}
