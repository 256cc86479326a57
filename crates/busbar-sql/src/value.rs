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
}

impl Value {
    /// The value from a JSON value: numbers stay numbers, objects and arrays stay JSON.
    pub fn from_json(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
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
        }
    }
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

    /// A float; NaN and infinities, which JSON cannot hold, are null.
    pub fn float(&mut self, f: f64) {
        if f.is_finite() {
            self.out.extend_from_slice(f.to_string().as_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
