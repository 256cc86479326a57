//! Values of the fast interpreter ([`crate::fast`]): JSON read straight from the input bytes
//! (strings without escapes and numbers with a fraction or an exponent are borrowed, never
//! copied) and written back exactly as jaq writes them.
//!
//! Anything the reader is not sure to read exactly as jaq does (a number beyond 64 bits, a
//! lone surrogate, a duplicate key in a large object, grammar outside strict JSON) is refused
//! with `None`: the caller then runs the program on jaq.

use std::rc::Rc;

/// A string: a slice of the input (or of the program), or built during the run.
#[derive(Clone, Debug)]
pub(crate) enum Str<'a> {
    Borrowed(&'a str),
    Owned(Rc<str>),
}

impl Str<'_> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Owned(s) => s,
        }
    }
}

/// A number as jaq keeps it: a machine integer, a float, or the decimal text it was written
/// as (kept until arithmetic needs its value, so `1.10` is written back as `1.10`).
#[derive(Clone, Debug)]
pub(crate) enum Num<'a> {
    Int(isize),
    Float(f64),
    Dec(Str<'a>),
    /// An integer beyond 64 bits, as written: only passed through (arithmetic on it goes to
    /// jaq, which keeps big integers exactly).
    Big(Str<'a>),
}

impl Num<'_> {
    /// The value as a float (a decimal text that does not parse is NaN, as in jaq).
    pub(crate) fn as_f64(&self) -> f64 {
        match self {
            Num::Int(i) => *i as f64,
            Num::Float(f) => *f,
            Num::Dec(s) | Num::Big(s) => s.as_str().parse().unwrap_or(f64::NAN),
        }
    }

    /// A decimal text as the float arithmetic sees it; other numbers unchanged (`None` for
    /// a big integer).
    fn value(&self) -> Option<Num<'static>> {
        Some(match self {
            Num::Int(i) => Num::Int(*i),
            Num::Float(f) => Num::Float(*f),
            Num::Dec(_) => Num::Float(self.as_f64()),
            Num::Big(_) => return None,
        })
    }
}

/// A JSON value.
#[derive(Clone, Debug)]
pub(crate) enum V<'a> {
    Null,
    Bool(bool),
    Num(Num<'a>),
    Str(Str<'a>),
    /// The items, and the array's nesting ([`V::depth`]).
    Arr(Rc<Vec<V<'a>>>, u16),
    /// Keys in insertion order; a key set again keeps its first position (as jaq's map does).
    /// With the object's nesting.
    Obj(Rc<Vec<(Str<'a>, V<'a>)>>, u16),
}

/// The deepest nesting a value may have, read or built by a program. Every walk of a value
/// (writing it out, dropping it) recurses once per level; this keeps the deepest within a
/// thread's stack, where a program building a list one level per `reduce` step would
/// otherwise overflow it and abort the process.
pub(crate) const MAX_DEPTH: u16 = 1024;

/// An array of `items`; `None` when it would nest deeper than [`MAX_DEPTH`].
pub(crate) fn arr(items: Vec<V<'_>>) -> Option<V<'_>> {
    let depth = 1 + items.iter().map(V::depth).max().unwrap_or(0);
    (depth <= MAX_DEPTH).then(|| V::Arr(Rc::new(items), depth))
}

/// An object of `fields`; `None` when it would nest deeper than [`MAX_DEPTH`].
pub(crate) fn obj<'a>(fields: Vec<(Str<'a>, V<'a>)>) -> Option<V<'a>> {
    let depth = 1 + fields.iter().map(|(_, v)| v.depth()).max().unwrap_or(0);
    (depth <= MAX_DEPTH).then(|| V::Obj(Rc::new(fields), depth))
}

impl<'a> V<'a> {
    /// Nesting: 0 for a scalar, 1 for an array or object of scalars (or an empty one).
    pub(crate) fn depth(&self) -> u16 {
        match self {
            V::Arr(_, d) | V::Obj(_, d) => *d,
            _ => 0,
        }
    }

    pub(crate) fn truthy(&self) -> bool {
        !matches!(self, V::Null | V::Bool(false))
    }

    pub(crate) fn string(s: String) -> V<'a> {
        V::Str(Str::Owned(s.into()))
    }

    /// `.[key]` on an object.
    pub(crate) fn get(&self, key: &str) -> Option<&V<'a>> {
        match self {
            V::Obj(o, _) => o.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Sets `key` in `fields` as jaq's map does: a new key goes last, an existing one keeps its
/// place and takes the new value.
pub(crate) fn insert<'a>(fields: &mut Vec<(Str<'a>, V<'a>)>, key: Str<'a>, value: V<'a>) {
    match fields.iter_mut().find(|(k, _)| k.as_str() == key.as_str()) {
        Some(slot) => slot.1 = value,
        None => fields.push((key, value)),
    }
}

/// Adds two numbers as jaq does (integers stay integers unless they overflow, which gives
/// up: jaq would go to big integers).
pub(crate) fn num_op<'a>(op: u8, l: &Num<'a>, r: &Num<'a>) -> Option<Num<'a>> {
    let (l, r) = (l.value()?, r.value()?);
    Some(match (op, l, r) {
        // Beyond 64 bits jaq goes on with a big integer, as exact as i128 here.
        (b'+', Num::Int(x), Num::Int(y)) => x
            .checked_add(y)
            .map_or_else(|| big(x as i128 + y as i128), Num::Int),
        (b'-', Num::Int(x), Num::Int(y)) => x
            .checked_sub(y)
            .map_or_else(|| big(x as i128 - y as i128), Num::Int),
        (b'*', Num::Int(x), Num::Int(y)) => x
            .checked_mul(y)
            .map_or_else(|| big(x as i128 * y as i128), Num::Int),
        (b'%', Num::Int(_), Num::Int(0)) => return None,
        (b'%', Num::Int(x), Num::Int(y)) => Num::Int(x.checked_rem(y).unwrap_or(0)),
        (op, l, r) => {
            let (x, y) = (l.as_f64(), r.as_f64());
            Num::Float(match op {
                b'+' => x + y,
                b'-' => x - y,
                b'*' => x * y,
                b'/' => x / y,
                b'%' => x % y,
                _ => return None,
            })
        }
    })
}

/// An integer beyond 64 bits, as jaq writes its big integers.
pub(crate) fn big<'a>(i: i128) -> Num<'a> {
    Num::Big(Str::Owned(i.to_string().into()))
}

/// Numeric order as jaq's (NaN below everything, −0 = +0); `None` for big integers.
pub(crate) fn num_cmp(l: &Num<'_>, r: &Num<'_>) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    let (lv, rv) = (l.value()?, r.value()?);
    if let (Num::Int(x), Num::Int(y)) = (&lv, &rv) {
        return Some(x.cmp(y));
    }
    let (x, y) = (lv.as_f64(), rv.as_f64());
    Some(if x == 0.0 && y == 0.0 {
        Ordering::Equal
    } else if x.is_nan() {
        Ordering::Less
    } else if y.is_nan() {
        Ordering::Greater
    } else {
        x.total_cmp(&y)
    })
}

/// What the reader refuses beyond the JSON grammar.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Deepest nesting (the top-level container is 1).
    pub max_depth: usize,
    /// A name twice in one object is refused (otherwise the last value wins, in the first
    /// one's place, as in jaq).
    pub reject_duplicates: bool,
    /// A number beyond f64's range is refused.
    pub finite_numbers: bool,
}

/// The rules for values jaq reads itself (variables, `tonumber`).
const LENIENT: Rules = Rules {
    max_depth: READ_MAX_DEPTH,
    reject_duplicates: false,
    finite_numbers: false,
};

/// Reads one JSON value (surrounded by JSON whitespace) from `text`.
pub(crate) fn parse(text: &str) -> Option<V<'_>> {
    parse_with(text, LENIENT)
}

/// Reads one JSON value under `rules` (its depth capped at 256).
pub(crate) fn parse_with(text: &str, rules: Rules) -> Option<V<'_>> {
    let mut r = Reader {
        s: text.as_bytes(),
        text,
        at: 0,
        depth: 0,
        rules: Rules {
            max_depth: rules.max_depth.min(READ_MAX_DEPTH),
            ..rules
        },
    };
    r.ws();
    let v = r.value()?;
    r.ws();
    (r.at == r.s.len()).then_some(v)
}

/// Reads a number written as strict JSON (`tonumber`'s input), surrounded by JSON whitespace.
pub(crate) fn parse_number(text: &str) -> Option<Num<'_>> {
    match parse(text)? {
        V::Num(n) => Some(n),
        _ => None,
    }
}

/// How deep the reader nests before giving up (jaq would read on; the caller falls back).
const READ_MAX_DEPTH: usize = 256;

/// Objects larger than this are checked for duplicate keys with a set rather than a scan.
const SCAN_KEYS: usize = 16;

struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    at: usize,
    depth: usize,
    rules: Rules,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.s.get(self.at) == Some(&b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self, w: &[u8]) -> bool {
        if self.s[self.at..].starts_with(w) {
            self.at += w.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Option<V<'a>> {
        match *self.s.get(self.at)? {
            b'n' if self.word(b"null") => Some(V::Null),
            b't' if self.word(b"true") => Some(V::Bool(true)),
            b'f' if self.word(b"false") => Some(V::Bool(false)),
            b'"' => self.string().map(V::Str),
            b'-' | b'0'..=b'9' => self.number().map(V::Num),
            b'[' => {
                self.deeper()?;
                self.at += 1;
                let mut items = Vec::new();
                self.ws();
                if !self.eat(b']') {
                    loop {
                        self.ws();
                        items.push(self.value()?);
                        self.ws();
                        if self.eat(b',') {
                            continue;
                        }
                        if self.eat(b']') {
                            break;
                        }
                        return None;
                    }
                }
                self.depth -= 1;
                arr(items)
            }
            b'{' => {
                self.deeper()?;
                self.at += 1;
                let mut fields: Vec<(Str<'a>, V<'a>)> = Vec::new();
                self.ws();
                if !self.eat(b'}') {
                    loop {
                        self.ws();
                        if self.s.get(self.at) != Some(&b'"') {
                            return None;
                        }
                        let key = self.string()?;
                        self.ws();
                        if !self.eat(b':') {
                            return None;
                        }
                        self.ws();
                        let value = self.value()?;
                        if fields.len() < SCAN_KEYS {
                            let same = fields.iter().position(|(k, _)| k.as_str() == key.as_str());
                            match same {
                                Some(_) if self.rules.reject_duplicates => return None,
                                Some(i) => fields[i].1 = value,
                                None => fields.push((key, value)),
                            }
                        } else {
                            fields.push((key, value));
                        }
                        self.ws();
                        if self.eat(b',') {
                            continue;
                        }
                        if self.eat(b'}') {
                            break;
                        }
                        return None;
                    }
                }
                if fields.len() > SCAN_KEYS {
                    let mut seen = std::collections::HashSet::with_capacity(fields.len());
                    if !fields.iter().all(|(k, _)| seen.insert(k.as_str())) {
                        // Duplicates in a large object: jaq's map keeps the first place.
                        return None;
                    }
                }
                self.depth -= 1;
                obj(fields)
            }
            _ => None,
        }
    }

    fn deeper(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= self.rules.max_depth).then_some(())
    }

    /// A string at `"`: borrowed when it has no escapes.
    fn string(&mut self) -> Option<Str<'a>> {
        self.at += 1;
        let start = self.at;
        loop {
            match *self.s.get(self.at)? {
                b'"' => {
                    let s = &self.text[start..self.at];
                    self.at += 1;
                    return Some(Str::Borrowed(s));
                }
                b'\\' => break,
                0..=0x1f => return None,
                _ => self.at += 1,
            }
        }
        let mut out = String::with_capacity(self.at - start + 16);
        out.push_str(&self.text[start..self.at]);
        loop {
            let run = self.at;
            while let Some(&b) = self.s.get(self.at) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.at += 1;
            }
            out.push_str(&self.text[run..self.at]);
            match *self.s.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(Str::Owned(out.into()));
                }
                b'\\' => {
                    self.at += 1;
                    let c = match *self.s.get(self.at)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) {
                                if !self.word(b"\\u") {
                                    return None;
                                }
                                self.at -= 1;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return None;
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            self.at -= 1;
                            char::from_u32(code)?
                        }
                        _ => return None,
                    };
                    self.at += 1;
                    out.push(c);
                }
                _ => return None,
            }
        }
    }

    /// The four hex digits after the `u` that `at` is on; leaves `at` after them.
    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.at + 1..self.at + 5)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let v = u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        self.at += 5;
        Some(v)
    }

    fn number(&mut self) -> Option<Num<'a>> {
        let t = busbar_json::number_token(self.s.get(self.at..).unwrap_or_default())?;
        if self.rules.finite_numbers && !t.finite {
            return None;
        }
        let text = self.text.get(self.at..self.at + t.len)?;
        self.at += t.len;
        if t.integral {
            Some(match text.parse() {
                Ok(i) => Num::Int(i),
                Err(_) => Num::Big(Str::Borrowed(text)),
            })
        } else {
            Some(Num::Dec(Str::Borrowed(text)))
        }
    }
}

/// Writes `v` as compact JSON, byte for byte as jaq writes it.
pub(crate) fn write(out: &mut Vec<u8>, v: &V<'_>) {
    match v {
        V::Null => out.extend_from_slice(b"null"),
        V::Bool(true) => out.extend_from_slice(b"true"),
        V::Bool(false) => out.extend_from_slice(b"false"),
        V::Num(n) => write_num(out, n),
        V::Str(s) => write_str(out, s.as_str()),
        V::Arr(items, _) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(out, item);
            }
            out.push(b']');
        }
        V::Obj(fields, _) => {
            out.push(b'{');
            for (i, (k, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, k.as_str());
                out.push(b':');
                write(out, item);
            }
            out.push(b'}');
        }
    }
}

pub(crate) fn write_num(out: &mut Vec<u8>, n: &Num<'_>) {
    match n {
        Num::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        // JSON has no text for these; jq writes NaN as null and the infinities as the
        // largest finite numbers.
        Num::Float(f) if f.is_nan() => out.extend_from_slice(b"null"),
        Num::Float(f) if f.is_infinite() => {
            let max = if *f > 0.0 { f64::MAX } else { f64::MIN };
            out.extend_from_slice(ryu::Buffer::new().format_finite(max).as_bytes());
        }
        Num::Float(f) => out.extend_from_slice(ryu::Buffer::new().format_finite(*f).as_bytes()),
        Num::Dec(s) | Num::Big(s) => out.extend_from_slice(s.as_str().as_bytes()),
    }
}

pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\t' => b"\\t",
            b'\r' => b"\\r",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(text: &str) -> Option<String> {
        let v = parse(text)?;
        let mut out = Vec::new();
        write(&mut out, &v);
        Some(String::from_utf8(out).expect("utf-8"))
    }

    #[test]
    fn reads_and_writes_like_jaq() {
        assert_eq!(
            round(r#" {"a":1.10,"b":[true,null,-0,1e5],"c":"x\u00e9\/\ud83d\ude00\u0001\u007f"} "#)
                .as_deref(),
            Some(r#"{"a":1.10,"b":[true,null,0,1e5],"c":"xé/😀\u0001\u007f"}"#)
        );
        assert_eq!(
            round(r#"{"a":1,"b":2,"a":3}"#).as_deref(),
            Some(r#"{"a":3,"b":2}"#)
        );
    }

    #[test]
    fn strict_rules_refuse_depth_duplicates_and_infinite_numbers() {
        let strict = Rules {
            max_depth: 2,
            reject_duplicates: true,
            finite_numbers: true,
        };
        assert!(parse_with(r#"{"a":[1,1e308]}"#, strict).is_some());
        assert!(parse_with(r#"{"a":[[1]]}"#, strict).is_none());
        assert!(parse_with(r#"{"a":1,"a":2}"#, strict).is_none());
        assert!(parse_with("1e309", strict).is_none());
        assert!(parse_with("1e309", LENIENT).is_some());
        assert!(parse_with(&"9".repeat(400), strict).is_none());
        assert!(parse_with(&"9".repeat(300), strict).is_some());
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        for bad in [
            r#""\ud800""#,
            "01",
            "[1,]",
            "{\"a\" 1}",
            "NaN",
            "1 2",
            "\"a\nb\"",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }
}
