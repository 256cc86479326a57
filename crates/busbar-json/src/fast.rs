//! A whole-document check for the common case: a recursive descent over a complete buffer
//! that says "valid" only for documents the streaming [`Scanner`](crate::Scanner) accepts under
//! the same [`Limits`], several times faster than feeding it byte by byte. It gives no error
//! of its own: when it says no, the scanner reads the document and names the problem.

use std::collections::HashSet;

use crate::Limits;

/// Deeper than this the check leaves the document to the (iterative) scanner.
const MAX_RECURSION: usize = 512;

/// Objects with more members than this look for duplicate names with a set.
const SCAN_NAMES: usize = 16;

/// True only if `doc` is one strict JSON value within `limits`.
pub(crate) fn valid(doc: &[u8], limits: Limits) -> bool {
    if std::str::from_utf8(doc).is_err() {
        return false;
    }
    let mut c = Check {
        s: doc,
        at: 0,
        depth: 0,
        max_depth: limits.max_depth.min(MAX_RECURSION),
        duplicates: limits.reject_duplicates,
    };
    c.ws();
    if !c.value() {
        return false;
    }
    c.ws();
    c.at == doc.len()
}

struct Check<'a> {
    s: &'a [u8],
    at: usize,
    depth: usize,
    max_depth: usize,
    duplicates: bool,
}

/// A member name: its raw bytes between the quotes, and whether it has escapes.
type Name<'a> = (&'a [u8], bool);

impl<'a> Check<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        let yes = self.s.get(self.at) == Some(&b);
        if yes {
            self.at += 1;
        }
        yes
    }

    fn word(&mut self, w: &[u8]) -> bool {
        let yes = self.s[self.at..].starts_with(w);
        if yes {
            self.at += w.len();
        }
        yes
    }

    fn value(&mut self) -> bool {
        match self.s.get(self.at) {
            Some(b'n') => self.word(b"null"),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'"') => self.string().is_some(),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => self.open() && self.items(b']', Self::value),
            Some(b'{') => {
                if !self.open() {
                    return false;
                }
                let mut names: Vec<Name<'a>> = Vec::new();
                let members = self.items(b'}', |c| {
                    if c.s.get(c.at) != Some(&b'"') {
                        return false;
                    }
                    let Some(name) = c.string() else {
                        return false;
                    };
                    if c.duplicates {
                        names.push(name);
                    }
                    c.ws();
                    if !c.eat(b':') {
                        return false;
                    }
                    c.ws();
                    c.value()
                });
                members && (!self.duplicates || distinct(&names))
            }
            _ => false,
        }
    }

    /// The items of a container after its opening bracket, each read by `item`, separated by
    /// commas, up to `close`; leaves the container's depth.
    fn items(&mut self, close: u8, mut item: impl FnMut(&mut Self) -> bool) -> bool {
        self.ws();
        if !self.eat(close) {
            loop {
                self.ws();
                if !item(self) {
                    return false;
                }
                self.ws();
                if self.eat(b',') {
                    continue;
                }
                if self.eat(close) {
                    break;
                }
                return false;
            }
        }
        self.depth -= 1;
        true
    }

    /// A new container, within the depth limit.
    fn open(&mut self) -> bool {
        self.at += 1;
        self.depth += 1;
        self.depth <= self.max_depth
    }

    /// A string at its opening quote: its raw content, or `None` when it breaks a rule.
    fn string(&mut self) -> Option<Name<'a>> {
        self.at += 1;
        let start = self.at;
        let mut escaped = false;
        loop {
            match *self.s.get(self.at)? {
                b'"' => {
                    let raw = &self.s[start..self.at];
                    self.at += 1;
                    return Some((raw, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at += 1;
                    match *self.s.get(self.at)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                        b'u' => {
                            let unit = self.hex4()?;
                            match unit {
                                0xd800..=0xdbff => {
                                    if !self.word(b"\\u") {
                                        return None;
                                    }
                                    self.at -= 1;
                                    if !(0xdc00..=0xdfff).contains(&self.hex4()?) {
                                        return None;
                                    }
                                }
                                0xdc00..=0xdfff => return None,
                                _ => {}
                            }
                        }
                        _ => return None,
                    }
                }
                0..=0x1f => return None,
                // UTF-8 was checked for the whole document.
                _ => self.at += 1,
            }
        }
    }

    /// The four hex digits after the `u` at `at`; leaves `at` after them.
    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.at + 1..self.at + 5)?;
        let mut v = 0;
        for &d in digits {
            v = (v << 4) | char::from(d).to_digit(16)?;
        }
        self.at += 5;
        Some(v)
    }

    fn number(&mut self) -> bool {
        match number_token(self.s.get(self.at..).unwrap_or_default()) {
            Some(t) if t.finite => {
                self.at += t.len;
                true
            }
            _ => false,
        }
    }
}

/// A JSON number (RFC 8259's grammar) at the start of some bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberToken {
    /// Its length in bytes.
    pub len: usize,
    /// No fraction and no exponent.
    pub integral: bool,
    /// Within f64's range.
    pub finite: bool,
}

/// The JSON number at the start of `s`, if one is there (what follows it is not looked at).
pub fn number_token(s: &[u8]) -> Option<NumberToken> {
    let digits = |at: &mut usize| {
        let start = *at;
        while let Some(b'0'..=b'9') = s.get(*at) {
            *at += 1;
        }
        *at - start
    };
    let mut at = usize::from(s.first() == Some(&b'-'));
    let first = at;
    let n = digits(&mut at);
    if n == 0 || (n > 1 && s[first] == b'0') {
        return None;
    }
    let mut integral = true;
    if s.get(at) == Some(&b'.') {
        at += 1;
        integral = false;
        if digits(&mut at) == 0 {
            return None;
        }
    }
    let mut exponent = false;
    if let Some(b'e' | b'E') = s.get(at) {
        at += 1;
        integral = false;
        exponent = true;
        if let Some(b'+' | b'-') = s.get(at) {
            at += 1;
        }
        if digits(&mut at) == 0 {
            return None;
        }
    }
    // Beyond f64's range only with an exponent or hundreds of digits.
    let finite = !(exponent || at > 300)
        || std::str::from_utf8(&s[..at])
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .is_some_and(f64::is_finite);
    Some(NumberToken {
        len: at,
        integral,
        finite,
    })
}

/// True when no two names are equal once unescaped.
fn distinct(names: &[Name<'_>]) -> bool {
    if names.len() < 2 {
        return true;
    }
    if names.iter().any(|(_, escaped)| *escaped) {
        let mut seen = HashSet::with_capacity(names.len());
        return names.iter().all(|n| seen.insert(unescape(n.0)));
    }
    if names.len() > SCAN_NAMES {
        let mut seen = HashSet::with_capacity(names.len());
        return names.iter().all(|n| seen.insert(n.0));
    }
    names
        .iter()
        .enumerate()
        .all(|(i, (a, _))| names[..i].iter().all(|(b, _)| a != b))
}

/// A name's text (its escapes were checked already).
fn unescape(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(raw.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let unit = u32::from_str_radix(&hex, 16).unwrap_or(0xfffd);
                let code = if (0xd800..0xdc00).contains(&unit) {
                    let low: String = chars.by_ref().skip(2).take(4).collect();
                    let low = u32::from_str_radix(&low, 16).unwrap_or(0xdc00);
                    0x10000 + ((unit - 0xd800) << 10) + (low.saturating_sub(0xdc00))
                } else {
                    unit
                };
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Limits = Limits {
        max_depth: 64,
        reject_duplicates: true,
    };

    #[test]
    fn ordinary_documents_pass_without_the_scanner() {
        for doc in [
            r#"{"a":[1,-0.5e3,true,null,"x\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"],"b":{"c":{}},"d":[]}"#,
            "  [ 1 , 2 ]\n",
            r#""é😀""#,
            "0",
            r#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}"#,
            r#"{"\u0061":1,"b":2}"#,
        ] {
            assert!(valid(doc.as_bytes(), STRICT), "{doc}");
        }
        assert!(!valid(br#"{"a":1,"\u0061":2}"#, STRICT));
        assert!(!valid(b"[1,]", STRICT));
    }
}
