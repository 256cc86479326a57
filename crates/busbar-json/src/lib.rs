//! busbar's streaming JSON: a push scanner that checks RFC 8259 strictly (grammar, UTF-8,
//! escapes and surrogate pairs, numbers within f64's range, a nesting limit, optionally
//! duplicate member names) chunk by chunk, at any split, and decides a "simple path" (`$.a.b`,
//! `$['a b'][0]`: member names and array indexes only) as soon as the bytes read allow: the
//! first value at the path, or its absence.
//!
//! After a decision the same scanner goes on checking the rest of a document (what a route
//! with `json_check: whole` needs), without tracking the path any more.
//!
//! Duplicate member names: the path follows the first occurrence of a name; with
//! [`Limits::reject_duplicates`] a second occurrence of a name in the same object is an error
//! wherever it is.

use std::collections::HashSet;

mod fast;

pub use fast::{number_token, NumberToken};

/// Limits and checks of a scan.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest nesting of objects and arrays allowed (the top-level value's container is 1).
    pub max_depth: usize,
    /// A name twice in one object is an error.
    pub reject_duplicates: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            reject_duplicates: false,
        }
    }
}

/// Why a document is refused, and where (byte offset from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// Byte offset of the offending byte (or of the end, for a truncated document).
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

impl std::error::Error for JsonError {}

/// One step of a simple path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// An object member.
    Name(String),
    /// An array element (from 0).
    Index(usize),
}

/// A JSONPath made of member names and non-negative array indexes only, decidable while the
/// document streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimplePath(pub Vec<Segment>);

impl SimplePath {
    /// The simple path `text` denotes, or `None` when it uses anything else (filters,
    /// wildcards, descendants, slices, negative indexes, functions): those need the whole
    /// document. Accepts `$`, `.name` (RFC 9535 member-name shorthand: ASCII letters, digits,
    /// `_`, and non-ASCII, not starting with a digit), `['name']` / `["name"]` (with the
    /// RFC's escapes) and `[N]`.
    pub fn parse(text: &str) -> Option<SimplePath> {
        let b = text.as_bytes();
        if b.first() != Some(&b'$') {
            return None;
        }
        let mut i = 1;
        let mut segs = Vec::new();
        while i < b.len() {
            match b[i] {
                b'.' => {
                    i += 1;
                    let start = i;
                    while i < b.len() {
                        let c = b[i];
                        let ok = c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
                        if !ok {
                            break;
                        }
                        i += 1;
                    }
                    if start == i || b[start].is_ascii_digit() {
                        return None;
                    }
                    segs.push(Segment::Name(text[start..i].to_owned()));
                }
                b'[' => {
                    i += 1;
                    match b.get(i)? {
                        q @ (b'\'' | b'"') => {
                            let q = *q;
                            i += 1;
                            let mut name = String::new();
                            loop {
                                let c = *b.get(i)?;
                                if c == q {
                                    i += 1;
                                    break;
                                }
                                if c == b'\\' {
                                    let e = *b.get(i + 1)?;
                                    i += 2;
                                    match e {
                                        b'b' => name.push('\u{8}'),
                                        b'f' => name.push('\u{c}'),
                                        b'n' => name.push('\n'),
                                        b'r' => name.push('\r'),
                                        b't' => name.push('\t'),
                                        b'/' => name.push('/'),
                                        b'\\' => name.push('\\'),
                                        b'\'' if q == b'\'' => name.push('\''),
                                        b'"' if q == b'"' => name.push('"'),
                                        _ => return None,
                                    }
                                    continue;
                                }
                                if c < 0x20 {
                                    return None;
                                }
                                let ch = text[i..].chars().next()?;
                                name.push(ch);
                                i += ch.len_utf8();
                            }
                            segs.push(Segment::Name(name));
                        }
                        b'0'..=b'9' => {
                            let start = i;
                            while i < b.len() && b[i].is_ascii_digit() {
                                i += 1;
                            }
                            let digits = &text[start..i];
                            if digits.len() > 1 && digits.starts_with('0') {
                                return None;
                            }
                            segs.push(Segment::Index(digits.parse().ok()?));
                        }
                        _ => return None,
                    }
                    if b.get(i) != Some(&b']') {
                        return None;
                    }
                    i += 1;
                }
                _ => return None,
            }
        }
        Some(SimplePath(segs))
    }
}

/// The first value at a simple path.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// A string, unescaped.
    String(String),
    /// A number, as written.
    Number(String),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// An object (decided at its `{`).
    Object,
    /// An array (decided at its `[`).
    Array,
}

/// What a scan decided about its path.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The path's first value.
    Found(Found),
    /// Nothing at the path.
    Absent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
}

/// Where in a container the scanner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A value (top level, after `:` or an array's `,`).
    Value,
    /// After `[`: a value or `]`.
    ValueOrClose,
    /// After `{`: a name or `}`.
    NameOrClose,
    /// After an object's `,`: a name.
    Name,
    /// After a name: `:`.
    Colon,
    /// After a value: `,` or the container's close (at top level, only whitespace).
    CommaOrClose,
}

#[derive(Debug)]
struct Frame {
    kind: Kind,
    /// Index of the element being read (arrays).
    index: usize,
    /// This container is the node the path's first `depth - 1` segments select.
    on_path: bool,
    /// Names seen (only when duplicates are refused).
    names: Option<HashSet<String>>,
}

/// The token being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    None,
    /// A string; `name` when it is a member name.
    Str {
        name: bool,
    },
    Num,
    Lit,
}

/// The streaming scanner.
#[derive(Debug)]
pub struct Scanner {
    limits: Limits,
    path: Option<Vec<Segment>>,
    decided: bool,
    stack: Vec<Frame>,
    expect: Expect,
    top_done: bool,
    token: Token,
    /// The token being read is the path's target.
    token_target: bool,
    /// Keep the string's bytes (a name, or the target).
    keep: bool,
    /// Escape state: 0 none, 1 after `\`, 2..=5 reading the \u hex digits.
    esc: u8,
    /// UTF-8 continuation bytes expected, and the range allowed for the next one.
    cont: u8,
    lo: u8,
    hi: u8,
    /// A \u code unit being read, and a high surrogate waiting for its low half.
    unit: u32,
    high: Option<u32>,
    /// Unescaped bytes of the string being kept; text of the number being read.
    raw: Vec<u8>,
    num: String,
    lit: &'static [u8],
    lit_at: usize,
    /// The value about to start is the path's target / on the path.
    pending_target: bool,
    pending_on_path: bool,
    offset: u64,
    consumed: u64,
}

impl Scanner {
    /// A scanner that only checks.
    pub fn new(limits: Limits) -> Scanner {
        Scanner::make(limits, None)
    }

    /// A scanner that decides `path` and checks what it reads.
    pub fn with_path(path: &SimplePath, limits: Limits) -> Scanner {
        Scanner::make(limits, Some(path.0.clone()))
    }

    fn make(limits: Limits, path: Option<Vec<Segment>>) -> Scanner {
        Scanner {
            limits,
            decided: path.is_none(),
            pending_on_path: path.is_some(),
            pending_target: path.as_ref().is_some_and(Vec::is_empty),
            path,
            stack: Vec::new(),
            expect: Expect::Value,
            top_done: false,
            token: Token::None,
            token_target: false,
            keep: false,
            esc: 0,
            cont: 0,
            lo: 0x80,
            hi: 0xbf,
            unit: 0,
            high: None,
            raw: Vec::new(),
            num: String::new(),
            lit: b"",
            lit_at: 0,
            offset: 0,
            consumed: 0,
        }
    }

    /// Bytes fed up to and including the one that decided (all bytes fed when undecided).
    pub fn bytes_consumed(&self) -> u64 {
        self.consumed
    }

    /// True once the path is decided (always, without a path).
    pub fn is_decided(&self) -> bool {
        self.decided
    }

    /// Feeds the next chunk. Returns the decision at the chunk that makes it, and stops
    /// there: the bytes after [`Scanner::bytes_consumed`] are not examined (feed them again
    /// to go on checking). `None` while undecided, and after the decision.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Option<Decision>, JsonError> {
        let mut i = 0;
        while i < chunk.len() {
            // Fast path: a run of plain ASCII inside a string (no quote, backslash, control
            // or non-ASCII byte) needs no state change, only copying when the string is kept.
            if matches!(self.token, Token::Str { .. })
                && self.esc == 0
                && self.cont == 0
                && self.high.is_none()
            {
                let run = chunk[i..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
                    .unwrap_or(chunk.len() - i);
                if run > 0 {
                    if self.keep {
                        self.raw.extend_from_slice(&chunk[i..i + run]);
                    }
                    i += run;
                    self.offset += run as u64;
                    continue;
                }
            }
            let decision = self.byte(chunk[i])?;
            i += 1;
            self.offset += 1;
            if let Some(d) = decision {
                self.consumed = self.offset;
                return Ok(Some(d));
            }
        }
        if !self.decided {
            self.consumed = self.offset;
        }
        Ok(None)
    }

    /// The end of the document: an error when it is incomplete; the decision when there was
    /// none yet (nothing at the path).
    pub fn finish(&mut self) -> Result<Option<Decision>, JsonError> {
        let mut decision = None;
        if self.token == Token::Num {
            decision = self.end_number()?;
        }
        if self.token != Token::None || !self.stack.is_empty() {
            return Err(self.err("the document ends early"));
        }
        if !self.top_done {
            return Err(self.err("no JSON value"));
        }
        if decision.is_none() && !self.decided {
            self.decided = true;
            decision = Some(Decision::Absent);
        }
        Ok(decision)
    }

    fn err(&self, message: &str) -> JsonError {
        JsonError {
            offset: self.offset,
            message: message.to_owned(),
        }
    }

    fn decide(&mut self, d: Decision) -> Option<Decision> {
        if self.decided {
            return None;
        }
        self.decided = true;
        Some(d)
    }

    fn byte(&mut self, c: u8) -> Result<Option<Decision>, JsonError> {
        match self.token {
            Token::Str { name } => self.string_byte(c, name),
            Token::Num => {
                if matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    if self.num.len() > 4096 {
                        return Err(self.err("number too long"));
                    }
                    self.num.push(c as char);
                    return Ok(None);
                }
                // The number ends at this byte, which is then read as what follows it.
                let decided = self.end_number()?;
                let after = self.structural(c)?;
                Ok(decided.or(after))
            }
            Token::Lit => {
                if c != self.lit[self.lit_at] {
                    return Err(self.err("invalid literal"));
                }
                self.lit_at += 1;
                if self.lit_at < self.lit.len() {
                    return Ok(None);
                }
                self.token = Token::None;
                let found = match self.lit {
                    b"true" => Found::Bool(true),
                    b"false" => Found::Bool(false),
                    _ => Found::Null,
                };
                Ok(self.value_done(found))
            }
            Token::None => self.structural(c),
        }
    }

    fn end_number(&mut self) -> Result<Option<Decision>, JsonError> {
        self.token = Token::None;
        if !valid_number(&self.num) {
            return Err(self.err("invalid number"));
        }
        match self.num.parse::<f64>() {
            Ok(v) if v.is_finite() => {}
            _ => return Err(self.err("number beyond the range of a 64-bit float")),
        }
        let text = if self.token_target {
            std::mem::take(&mut self.num)
        } else {
            String::new()
        };
        Ok(self.value_done(Found::Number(text)))
    }

    /// A scalar value ended.
    fn value_done(&mut self, found: Found) -> Option<Decision> {
        self.expect = Expect::CommaOrClose;
        if self.stack.is_empty() {
            self.top_done = true;
        }
        if std::mem::take(&mut self.token_target) {
            return self.decide(Decision::Found(found));
        }
        None
    }

    fn structural(&mut self, c: u8) -> Result<Option<Decision>, JsonError> {
        if matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            return Ok(None);
        }
        if self.top_done {
            return Err(self.err("text after the JSON value"));
        }
        match self.expect {
            Expect::Value | Expect::ValueOrClose => {
                if c == b']' && self.expect == Expect::ValueOrClose {
                    return Ok(self.close());
                }
                self.start_value(c)
            }
            Expect::NameOrClose | Expect::Name => {
                if c == b'}' && self.expect == Expect::NameOrClose {
                    return Ok(self.close());
                }
                if c != b'"' {
                    return Err(self.err("expected a member name in double quotes"));
                }
                self.begin_string(true, true);
                Ok(None)
            }
            Expect::Colon => {
                if c != b':' {
                    return Err(self.err("expected ':' after a member name"));
                }
                self.expect = Expect::Value;
                Ok(None)
            }
            Expect::CommaOrClose => {
                let kind = match self.stack.last() {
                    Some(f) => f.kind,
                    None => return Err(self.err("text after the JSON value")),
                };
                match (c, kind) {
                    (b',', Kind::Object) => {
                        self.expect = Expect::Name;
                        Ok(None)
                    }
                    (b',', Kind::Array) => {
                        self.expect = Expect::Value;
                        let depth = self.stack.len();
                        let (on_path, index) = match self.stack.last_mut() {
                            Some(f) => {
                                f.index += 1;
                                (f.on_path, f.index)
                            }
                            None => (false, 0),
                        };
                        self.child(depth, on_path, &Segment::Index(index));
                        Ok(None)
                    }
                    (b'}', Kind::Object) | (b']', Kind::Array) => Ok(self.close()),
                    _ => Err(self.err(match kind {
                        Kind::Object => "expected ',' or '}'",
                        Kind::Array => "expected ',' or ']'",
                    })),
                }
            }
        }
    }

    /// Sets whether the child `seg` of the container at `depth` is on the path or its target.
    fn child(&mut self, depth: usize, parent_on_path: bool, seg: &Segment) {
        self.pending_target = false;
        self.pending_on_path = false;
        if self.decided || !parent_on_path {
            return;
        }
        if let Some(path) = &self.path {
            if path.get(depth - 1) == Some(seg) {
                self.pending_on_path = true;
                self.pending_target = depth == path.len();
            }
        }
    }

    fn close(&mut self) -> Option<Decision> {
        let frame = self.stack.pop();
        self.expect = Expect::CommaOrClose;
        if self.stack.is_empty() {
            self.top_done = true;
        }
        // The container the path goes through closed without the next segment.
        if frame.is_some_and(|f| f.on_path) {
            return self.decide(Decision::Absent);
        }
        None
    }

    fn start_value(&mut self, c: u8) -> Result<Option<Decision>, JsonError> {
        let target = std::mem::take(&mut self.pending_target);
        let on_path = std::mem::take(&mut self.pending_on_path) && !self.decided;
        match c {
            b'{' | b'[' => {
                let kind = if c == b'{' { Kind::Object } else { Kind::Array };
                if self.stack.len() >= self.limits.max_depth {
                    return Err(self.err(&format!(
                        "nesting deeper than {} levels",
                        self.limits.max_depth
                    )));
                }
                let depth = self.stack.len() + 1;
                self.stack.push(Frame {
                    kind,
                    index: 0,
                    on_path: on_path && !target,
                    names: self.limits.reject_duplicates.then(HashSet::new),
                });
                self.expect = match kind {
                    Kind::Object => Expect::NameOrClose,
                    Kind::Array => Expect::ValueOrClose,
                };
                if on_path && target {
                    let found = match kind {
                        Kind::Object => Found::Object,
                        Kind::Array => Found::Array,
                    };
                    return Ok(self.decide(Decision::Found(found)));
                }
                if on_path {
                    // The next segment must suit the container, or nothing is at the path.
                    let seg = self.path.as_ref().and_then(|p| p.get(depth - 1)).cloned();
                    match (&seg, kind) {
                        (Some(Segment::Name(_)), Kind::Object) => {}
                        (Some(Segment::Index(_)), Kind::Array) => {
                            self.child(depth, true, &Segment::Index(0));
                        }
                        _ => {
                            if let Some(f) = self.stack.last_mut() {
                                f.on_path = false;
                            }
                            return Ok(self.decide(Decision::Absent));
                        }
                    }
                }
                Ok(None)
            }
            b'"' => {
                self.token_target = on_path && target;
                self.begin_string(false, self.token_target);
                if on_path && !target {
                    return Ok(self.decide(Decision::Absent));
                }
                Ok(None)
            }
            b'-' | b'0'..=b'9' => {
                self.token = Token::Num;
                self.token_target = on_path && target;
                self.num.clear();
                self.num.push(c as char);
                if on_path && !target {
                    return Ok(self.decide(Decision::Absent));
                }
                Ok(None)
            }
            b't' | b'f' | b'n' => {
                self.token = Token::Lit;
                self.token_target = on_path && target;
                self.lit = match c {
                    b't' => b"true",
                    b'f' => b"false",
                    _ => b"null",
                };
                self.lit_at = 1;
                if on_path && !target {
                    return Ok(self.decide(Decision::Absent));
                }
                Ok(None)
            }
            _ => Err(self.err("expected a JSON value")),
        }
    }

    fn begin_string(&mut self, name: bool, keep: bool) {
        self.token = Token::Str { name };
        self.keep = keep;
        self.esc = 0;
        self.cont = 0;
        self.high = None;
        self.raw.clear();
    }

    fn push_char(&mut self, ch: u32) -> Result<(), JsonError> {
        let ch = char::from_u32(ch).ok_or_else(|| self.err("invalid \\u escape"))?;
        if self.keep {
            let mut buf = [0u8; 4];
            self.raw
                .extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
        Ok(())
    }

    fn string_byte(&mut self, c: u8, name: bool) -> Result<Option<Decision>, JsonError> {
        if self.cont > 0 {
            if c < self.lo || c > self.hi {
                return Err(self.err("invalid UTF-8"));
            }
            self.cont -= 1;
            self.lo = 0x80;
            self.hi = 0xbf;
            if self.keep {
                self.raw.push(c);
            }
            return Ok(None);
        }
        match self.esc {
            0 => {}
            1 => {
                self.esc = 0;
                let unescaped = match c {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'u' => {
                        self.esc = 2;
                        self.unit = 0;
                        return Ok(None);
                    }
                    _ => return Err(self.err("invalid escape in a string")),
                };
                if self.high.is_some() {
                    return Err(self.err("a high surrogate without its low half"));
                }
                if self.keep {
                    self.raw.push(unescaped);
                }
                return Ok(None);
            }
            _ => {
                let v = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    b'A'..=b'F' => c - b'A' + 10,
                    _ => return Err(self.err("invalid \\u escape")),
                };
                self.unit = (self.unit << 4) | u32::from(v);
                self.esc += 1;
                if self.esc < 6 {
                    return Ok(None);
                }
                self.esc = 0;
                let unit = self.unit;
                match (self.high.take(), unit) {
                    (Some(high), 0xdc00..=0xdfff) => {
                        self.push_char(0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00))?;
                    }
                    (Some(_), _) => return Err(self.err("a high surrogate without its low half")),
                    (None, 0xd800..=0xdbff) => self.high = Some(unit),
                    (None, 0xdc00..=0xdfff) => {
                        return Err(self.err("a low surrogate without its high half"))
                    }
                    (None, u) => self.push_char(u)?,
                }
                return Ok(None);
            }
        }
        if self.high.is_some() && c != b'\\' {
            return Err(self.err("a high surrogate without its low half"));
        }
        match c {
            b'"' => self.end_string(name),
            b'\\' => {
                self.esc = 1;
                Ok(None)
            }
            0x00..=0x1f => Err(self.err("a control character in a string")),
            0x20..=0x7f => {
                if self.keep {
                    self.raw.push(c);
                }
                Ok(None)
            }
            0xc2..=0xdf => self.lead(c, 1, 0x80, 0xbf),
            0xe0 => self.lead(c, 2, 0xa0, 0xbf),
            0xe1..=0xec | 0xee..=0xef => self.lead(c, 2, 0x80, 0xbf),
            0xed => self.lead(c, 2, 0x80, 0x9f),
            0xf0 => self.lead(c, 3, 0x90, 0xbf),
            0xf1..=0xf3 => self.lead(c, 3, 0x80, 0xbf),
            0xf4 => self.lead(c, 3, 0x80, 0x8f),
            _ => Err(self.err("invalid UTF-8")),
        }
    }

    fn lead(&mut self, c: u8, cont: u8, lo: u8, hi: u8) -> Result<Option<Decision>, JsonError> {
        self.cont = cont;
        self.lo = lo;
        self.hi = hi;
        if self.keep {
            self.raw.push(c);
        }
        Ok(None)
    }

    fn end_string(&mut self, name: bool) -> Result<Option<Decision>, JsonError> {
        self.token = Token::None;
        let bytes = std::mem::take(&mut self.raw);
        // Valid by construction: every sequence was checked as it came.
        let text = String::from_utf8(bytes).map_err(|_| self.err("invalid UTF-8"))?;
        if !name {
            return Ok(self.value_done(Found::String(text)));
        }
        self.expect = Expect::Colon;
        let depth = self.stack.len();
        let on_path = match self.stack.last_mut() {
            Some(frame) => {
                if let Some(names) = &mut frame.names {
                    if !names.insert(text.clone()) {
                        return Err(self.err(&format!("duplicate member name \"{text}\"")));
                    }
                }
                frame.on_path
            }
            None => false,
        };
        self.child(depth, on_path, &Segment::Name(text));
        Ok(None)
    }
}

/// Checks a whole document (duplicates refused or not, per `limits`). A document that passes
/// a quick recursive check is valid; any other is read by the [`Scanner`], which names the
/// problem.
pub fn check(doc: &[u8], limits: Limits) -> Result<(), JsonError> {
    if fast::valid(doc, limits) {
        return Ok(());
    }
    scan(doc, limits)
}

/// [`check`] by the [`Scanner`] alone.
pub fn scan(doc: &[u8], limits: Limits) -> Result<(), JsonError> {
    let mut s = Scanner::new(limits);
    s.feed(doc)?;
    s.finish()?;
    Ok(())
}

/// True when `t` is a JSON number as RFC 8259 writes one (`-0.5e3`; not `01`, `.5`, `NaN`).
pub fn is_number(t: &str) -> bool {
    valid_number(t)
}

fn valid_number(t: &str) -> bool {
    let b = t.as_bytes();
    let mut i = 0;
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while b.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    i == b.len()
}

/// A compiled RFC 9535 JSONPath query, with its simple form when it has one (decidable
/// while a document streams).
#[derive(Debug, Clone)]
pub struct Query {
    path: serde_json_path::JsonPath,
    simple: Option<SimplePath>,
}

impl Query {
    /// Compiles `text`; the error says what is wrong with it.
    pub fn compile(text: &str) -> Result<Query, String> {
        let path = serde_json_path::JsonPath::parse(&upper_hex_escapes(text))
            .map_err(|e| e.to_string())?;
        Ok(Query {
            path,
            simple: SimplePath::parse(text),
        })
    }

    /// The query as a simple path, when it is one.
    pub fn simple(&self) -> Option<&SimplePath> {
        self.simple.as_ref()
    }

    /// Every node the query selects, in the RFC's order.
    pub fn all<'a>(&self, value: &'a serde_json::Value) -> Vec<&'a serde_json::Value> {
        self.path.query(value).all()
    }

    /// The first node the query selects.
    pub fn first<'a>(&self, value: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        self.path.query(value).all().into_iter().next()
    }
}

/// `text` with the hex digits of its `\uXXXX` escapes in upper case: RFC 9535's are
/// case-insensitive, and the parser takes a surrogate pair only in upper case.
fn upper_hex_escapes(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\\') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '\\' {
            continue;
        }
        match chars.next() {
            Some('u') => {
                out.push('u');
                for h in chars.by_ref().take(4) {
                    out.push(h.to_ascii_uppercase());
                }
            }
            // `\\` and every other escape: the next character is the escape's own.
            Some(other) => out.push(other),
            None => {}
        }
    }
    out.into()
}

/// The deepest nesting a whole document may have ([`parse_strict`]): serde_json's own limit.
/// Its reader, and every walk of the tree it builds (queries, conversion, writing, dropping),
/// recurse once per level, and its limit keeps them well within a thread's stack.
pub const WHOLE_MAX_DEPTH: usize = 127;

/// Parses a whole document after checking it strictly with `limits` (nesting up to
/// `limits.max_depth` and at most [`WHOLE_MAX_DEPTH`], and duplicate names when refused):
/// serde_json alone keeps the last of duplicate names, and its own depth error names neither
/// the limit nor where the document broke it.
pub fn parse_strict(doc: &[u8], limits: Limits) -> Result<serde_json::Value, JsonError> {
    let limits = Limits {
        max_depth: limits.max_depth.min(WHOLE_MAX_DEPTH),
        ..limits
    };
    check(doc, limits)?;
    serde_json::from_slice(doc).map_err(|e| JsonError {
        offset: 0,
        message: e.to_string(),
    })
}
