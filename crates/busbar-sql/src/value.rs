//! Parameter values going in, and the JSON writer rows come out through.

use base64::Engine as _;

/// A parameter value, bound to a statement position.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// Text (also what a timestamp, a numeric or a date is given as).
    Text(String),
    /// A JSON document (bound as its text).
    Json(serde_json::Value),
    /// A number neither an `i64` nor an `f64` holds exactly (a JSON integer past 64 bits, a
    /// decimal with more digits than a double keeps), as its decimal text. PostgreSQL parses
    /// it for the parameter's type (`numeric` keeps every digit); SQLite, which would round
    /// it, refuses it with a 400 naming the parameter.
    Decimal(String),
}

impl Value {
    /// The value from a JSON value: numbers stay numbers, objects and arrays stay JSON.
    ///
    /// `literal` is the number as the document wrote it, when known: serde_json keeps an
    /// integer past `u64` or any decimal as an `f64` only, so a number whose `f64` is not
    /// the written value (more than about 17 significant digits) becomes a
    /// [`Value::Decimal`] of the written text, never a silently rounded double.
    pub fn from_json(v: &serde_json::Value, literal: Option<&str>) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::Decimal(u.to_string())
                } else {
                    let f = n.as_f64().unwrap_or(f64::NAN);
                    match literal {
                        Some(t) if !same_decimal(t, &f.to_string()) => Value::Decimal(t.to_owned()),
                        _ => Value::Float(f),
                    }
                }
            }
            serde_json::Value::String(s) => Value::Text(s.clone()),
            other => Value::Json(other.clone()),
        }
    }

    /// The value as PostgreSQL's text input form, `None` for NULL.
    pub fn to_text(&self) -> Option<String> {
        match self {
            Value::Null => None,
            Value::Bool(b) => Some(if *b { "true" } else { "false" }.to_owned()),
            Value::Int(i) => Some(i.to_string()),
            // Display of f64 never uses an exponent and round-trips.
            Value::Float(f) => Some(f.to_string()),
            Value::Text(s) => Some(s.clone()),
            Value::Json(j) => Some(j.to_string()),
            Value::Decimal(t) => Some(t.clone()),
        }
    }

    /// What kind of value this is, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Text(_) => "text",
            Value::Json(_) => "a JSON document",
            Value::Decimal(_) => "a number",
        }
    }
}

/// True when two decimal texts (JSON number syntax) are the same number: the same sign,
/// significant digits and exponent (`1.50` and `15e-1` are; `0.1` and `0.10000000000000001`
/// are not).
fn same_decimal(a: &str, b: &str) -> bool {
    match (decimal_parts(a), decimal_parts(b)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A decimal text as (negative, significant digits, exponent): the value is
/// ±digits × 10^exponent, with no leading or trailing zero in the digits (zero: no digits).
fn decimal_parts(s: &str) -> Option<(bool, String, i64)> {
    let (negative, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (mantissa, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], s[i + 1..].parse::<i64>().ok()?),
        None => (s, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let all = format!("{int}{frac}");
    let lead = all.trim_start_matches('0');
    let digits = lead.trim_end_matches('0');
    if digits.is_empty() {
        return Some((false, String::new(), 0));
    }
    let exp = exp
        .checked_sub(i64::try_from(frac.len()).ok()?)?
        .checked_add(i64::try_from(lead.len() - digits.len()).ok()?)?;
    Some((negative, digits.to_owned(), exp))
}

/// How NUMERIC/DECIMAL columns are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NumericAs {
    /// As a JSON number with the database's digits, unrounded.
    #[default]
    Number,
    /// As a JSON string with the database's digits.
    String,
}

/// Writes rows as JSON objects into a buffer.
#[derive(Debug)]
pub(crate) struct RowWriter {
    pub out: Vec<u8>,
    /// Each column's name, already a JSON string followed by `:`.
    keys: Vec<Vec<u8>>,
    pub numeric: NumericAs,
    rows: u64,
}

impl RowWriter {
    pub fn new(columns: impl IntoIterator<Item = impl AsRef<str>>, numeric: NumericAs) -> Self {
        let keys = columns
            .into_iter()
            .map(|c| {
                let mut k = serde_json::to_vec(c.as_ref()).unwrap_or_default();
                k.push(b':');
                k
            })
            .collect();
        Self {
            out: Vec::with_capacity(256),
            keys,
            numeric,
            rows: 0,
        }
    }

    /// Names the columns (when they are known only once the first row is read).
    pub fn set_columns(&mut self, columns: impl IntoIterator<Item = impl AsRef<str>>) {
        self.keys = Self::new(columns, self.numeric).keys;
    }

    /// Starts a row; in a list, rows after the first are preceded by a comma.
    pub fn begin_row(&mut self, in_list: bool) {
        if in_list && self.rows > 0 {
            self.out.push(b',');
        }
        self.rows += 1;
        self.out.push(b'{');
    }

    pub fn end_row(&mut self) {
        self.out.push(b'}');
    }

    /// Writes the key of column `i`.
    pub fn key(&mut self, i: usize) {
        if i > 0 {
            self.out.push(b',');
        }
        let k = &self.keys[i];
        self.out.extend_from_slice(k);
    }

    pub fn null(&mut self) {
        self.out.extend_from_slice(b"null");
    }

    pub fn bool(&mut self, b: bool) {
        self.out
            .extend_from_slice(if b { b"true" } else { b"false" });
    }

    pub fn int(&mut self, i: i64) {
        self.out.extend_from_slice(i.to_string().as_bytes());
    }

    /// A float, in its shortest form that reads back as the same `f64`; NaN and infinities,
    /// which JSON cannot hold, are null.
    pub fn float(&mut self, f: f64) {
        self.float_of(f, f.is_finite());
    }

    /// A single-precision float (PostgreSQL's `real`) in the fewest digits that read back as
    /// it (`0.1`, not the `0.10000000149011612` of its value as a double).
    pub fn float32(&mut self, f: f32) {
        self.float_of(f, f.is_finite());
    }

    fn float_of<F: ryu::Float>(&mut self, f: F, finite: bool) {
        if finite {
            let mut buf = ryu::Buffer::new();
            self.out.extend_from_slice(shortest(&mut buf, f).as_bytes());
        } else {
            self.null();
        }
    }

    pub fn string(&mut self, s: &str) {
        // Writing a &str into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.out, s);
    }

    /// A decimal's digits (`-12.50`, `NaN`): a number or a string as configured; digits that are
    /// not a JSON number (NaN, Infinity) are always a string.
    pub fn numeric(&mut self, digits: &str) {
        if self.numeric == NumericAs::Number && is_json_number(digits) {
            self.out.extend_from_slice(digits.as_bytes());
        } else {
            self.string(digits);
        }
    }

    pub fn bytes(&mut self, b: &[u8]) {
        let s = base64::engine::general_purpose::STANDARD.encode(b);
        self.string(&s);
    }

    /// Raw JSON text the database vouches for (a JSON/JSONB column).
    pub fn raw_json(&mut self, text: &[u8]) {
        self.out.extend_from_slice(text);
    }
}

/// True when `s` is a JSON number (RFC 8259 grammar).
pub(crate) fn is_json_number(s: &str) -> bool {
    busbar_json::is_number(s)
}

/// Microseconds since 1970-01-01T00:00:00Z as RFC 3339 in UTC (`…Z`), with a fraction only
/// when there is one.
pub(crate) fn rfc3339_micros(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, m, d) = busbar_core::calendar::civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
    if frac != 0 {
        let f = format!(".{frac:06}");
        s.push_str(f.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// `f` (finite) in the fewest digits that read back as it, with an exponent far from 1
/// (`1e300`, `5e-324`, not 301 or 325 characters) and without a fraction when it is whole
/// (`100`, as Rust writes it).
pub fn shortest<F: ryu::Float>(buf: &mut ryu::Buffer, f: F) -> &str {
    let text = buf.format_finite(f);
    text.strip_suffix(".0").unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_short_as_they_read_back() {
        for (f, text) in [
            (100.0, "100"),
            (-0.0, "-0"),
            (0.1, "0.1"),
            (-2.5e-3, "-0.0025"),
            (57537.54751533645, "57537.54751533645"),
            (1e300, "1e300"),
            (f64::MAX, "1.7976931348623157e308"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(shortest(&mut ryu::Buffer::new(), f), text);
            let back: f64 = serde_json::from_str(text).expect("a JSON number");
            assert_eq!(back.to_bits(), f.to_bits(), "{text}");
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339_micros(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_micros(951_782_400_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339_micros(1_764_072_000_123_400),
            "2025-11-25T12:00:00.1234Z"
        );
        assert_eq!(rfc3339_micros(-1), "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn numbers_follow_the_json_grammar() {
        for ok in ["0", "-0", "12.50", "1e5", "-1.5E-3", "100"] {
            assert!(is_json_number(ok), "{ok}");
        }
        for bad in ["NaN", "Infinity", "01", "1.", ".5", "+1", "1e", "", "-"] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }

    #[test]
    fn rows_are_json_objects() {
        let mut w = RowWriter::new(["a", "b\"c"], NumericAs::String);
        w.begin_row(true);
        w.key(0);
        w.numeric("1.50");
        w.key(1);
        w.float(f64::NAN);
        w.end_row();
        w.begin_row(true);
        w.key(0);
        w.bytes(b"\x00\xff");
        w.key(1);
        w.string("x\ny");
        w.end_row();
        assert_eq!(
            String::from_utf8_lossy(&w.out),
            r#"{"a":"1.50","b\"c":null},{"a":"AP8=","b\"c":"x\ny"}"#
        );
    }

    #[test]
    fn json_numbers_keep_their_digits_when_a_double_would_not() {
        let n = |t: &str| -> serde_json::Value {
            serde_json::from_str(t).unwrap_or_else(|e| panic!("{t}: {e}"))
        };
        assert_eq!(Value::from_json(&n("42"), Some("42")), Value::Int(42));
        assert_eq!(
            Value::from_json(&n("9223372036854775808"), None),
            Value::Decimal("9223372036854775808".into())
        );
        assert_eq!(Value::from_json(&n("0.1"), Some("0.1")), Value::Float(0.1));
        assert_eq!(
            Value::from_json(&n("1.50"), Some("1.50")),
            Value::Float(1.5)
        );
        assert_eq!(
            Value::from_json(&n("15e-1"), Some("15e-1")),
            Value::Float(1.5)
        );
        assert_eq!(
            Value::from_json(&n("-0.0"), Some("-0.0")),
            Value::Float(-0.0)
        );
        // Parsed exactly: a loose parse read this as 57537.547515336446, the digits then
        // seemed to be that double's and were dropped for it.
        let digits = "57537.54751533645048055";
        assert_eq!(
            Value::from_json(&n(digits), Some(digits)),
            Value::Decimal(digits.into())
        );
        assert_eq!(
            Value::from_json(&n("57537.54751533645"), Some("57537.54751533645")),
            Value::Float(57537.54751533645)
        );
        let long = "12345678901234567890.12345";
        assert_eq!(
            Value::from_json(&n(long), Some(long)),
            Value::Decimal(long.into())
        );
        let close = "0.10000000000000000001";
        assert_eq!(
            Value::from_json(&n(close), Some(close)),
            Value::Decimal(close.into())
        );
        assert_eq!(Value::Decimal(long.into()).to_text().as_deref(), Some(long));
    }
}
