//! `${NAME}` and `${NAME:-default}` in config text, resolved before the YAML is parsed.
//!
//! An environment value goes in as the YAML around the reference would read it back: inside a
//! double-quoted scalar its `\`, `"` and control characters are escaped, inside a single-quoted
//! one its `'` is doubled. A line break anywhere else would start a new key, so such a value is
//! refused; as is one inside a single-quoted scalar, which folds line breaks into spaces. A
//! default is written in the config's own syntax and goes in as written.

/// Why a reference could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Unset, and no default.
    Missing,
    /// The value holds a line break outside a double-quoted scalar.
    LineBreak,
}

/// A reference that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadVar {
    /// The variable's name.
    pub name: String,
    /// 1-based line of the reference.
    pub line: usize,
    /// What is wrong with it.
    pub problem: Problem,
}

/// Where a reference stands in the YAML text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    /// Outside quoted scalars: plain scalars, block scalars, comments.
    Plain,
    /// Inside a double-quoted scalar.
    Double,
    /// Inside a single-quoted scalar.
    Single,
}

/// Follows quoted scalars, comments and block scalars through the text, as far as a value put
/// at a reference needs.
#[derive(Debug)]
struct Lexer {
    context: Context,
    /// In a comment or a block scalar's text, to the end of the line.
    skip_line: bool,
    /// Indentation of the line that opened a block scalar (`|` or `>`): more indented lines,
    /// and blank ones, are its text.
    block: Option<usize>,
    /// Spaces at the start of the current line so far, until something else comes.
    leading: Option<usize>,
    /// The current line's indentation.
    indent: usize,
    /// The current line's last character outside spaces, and whether spaces followed it.
    last: Option<char>,
    spaced: bool,
    /// A backslash escapes the next character (in a double-quoted scalar).
    escaped: bool,
    /// A `'` just seen in a single-quoted scalar: the scalar ends unless another follows.
    quote_pending: bool,
    /// The current line so far, outside quoted scalars and comments, to spot a block scalar's
    /// indicator at its end.
    line: String,
}

impl Lexer {
    fn new() -> Self {
        Lexer {
            context: Context::Plain,
            skip_line: false,
            block: None,
            leading: Some(0),
            indent: 0,
            last: None,
            spaced: false,
            escaped: false,
            quote_pending: false,
            line: String::new(),
        }
    }

    /// The context at a reference (a `'` just before it closed its scalar).
    fn context_here(&mut self) -> Context {
        if self.quote_pending {
            self.close_single();
        }
        self.context
    }

    fn close_single(&mut self) {
        self.quote_pending = false;
        self.context = Context::Plain;
        self.last = Some('\'');
        self.spaced = false;
    }

    fn feed(&mut self, c: char) {
        if c == '\n' {
            self.end_line();
            return;
        }
        if let Some(n) = self.leading {
            if c == ' ' {
                self.leading = Some(n + 1);
                return;
            }
            self.leading = None;
            self.indent = n;
            if let Some(block) = self.block {
                if n > block {
                    self.skip_line = true;
                } else {
                    self.block = None;
                }
            }
        }
        if self.skip_line {
            return;
        }
        match self.context {
            Context::Double => {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.context = Context::Plain;
                    self.last = Some(c);
                    self.spaced = false;
                }
            }
            Context::Single => {
                if self.quote_pending {
                    if c == '\'' {
                        // `''`: a quote inside the scalar.
                        self.quote_pending = false;
                    } else {
                        self.close_single();
                        self.feed(c);
                    }
                } else if c == '\'' {
                    self.quote_pending = true;
                }
            }
            Context::Plain => {
                if c == ' ' || c == '\t' {
                    self.spaced = true;
                    self.line.push(c);
                    return;
                }
                if c == '#' && (self.last.is_none() || self.spaced) {
                    self.skip_line = true;
                    return;
                }
                let starts_scalar = match self.last {
                    None | Some('[' | '{' | ',') => true,
                    Some(':' | '-' | '?') => self.spaced,
                    Some(_) => false,
                };
                match c {
                    '"' if starts_scalar => self.context = Context::Double,
                    '\'' if starts_scalar => self.context = Context::Single,
                    _ => self.line.push(c),
                }
                self.last = Some(c);
                self.spaced = false;
            }
        }
    }

    fn end_line(&mut self) {
        if self.quote_pending {
            self.close_single();
        }
        if self.context == Context::Plain && self.block.is_none() && self.leading.is_none() {
            // `key: |`, `- >-`, `key: |2 # note`: the next, more indented lines are text.
            let code = self.line.trim_end();
            let indicator = code.rsplit([' ', '\t']).next().unwrap_or("");
            let mut chars = indicator.chars();
            let is_block = matches!(chars.next(), Some('|' | '>'))
                && chars.all(|c| c == '+' || c == '-' || c.is_ascii_digit())
                && code[..code.len() - indicator.len()]
                    .trim_end()
                    .ends_with([':', '-']);
            if is_block {
                self.block = Some(self.indent);
            }
        }
        self.skip_line = false;
        self.escaped = false;
        self.leading = Some(0);
        self.last = None;
        self.spaced = false;
        self.line.clear();
    }
}

/// `value` as it must be written in `context` to read back as itself; `None` if it cannot be.
fn escaped(value: &str, context: Context) -> Option<String> {
    match context {
        Context::Double => {
            let mut out = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '"' => out.push_str("\\\""),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
                    c => out.push(c),
                }
            }
            Some(out)
        }
        _ if value.contains(['\n', '\r']) => None,
        Context::Single => Some(value.replace('\'', "''")),
        Context::Plain => Some(value.to_owned()),
    }
}

/// Replaces `${NAME}` and `${NAME:-default}` with values from `lookup`, written as the YAML
/// around each reference reads them back; `$$` is a literal `$`.
///
/// Every unset variable without a default, and every value that cannot stand where it is
/// referenced, is reported, not just the first.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<BadVar>> {
    let mut out = String::with_capacity(text.len());
    let mut bad = Vec::new();
    let mut line = 1;
    let mut lexer = Lexer::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let (before, after) = rest.split_at(i);
        line += before.matches('\n').count();
        before.chars().for_each(|c| lexer.feed(c));
        out.push_str(before);
        if let Some(r) = after.strip_prefix("$$") {
            lexer.feed('$');
            out.push('$');
            rest = r;
            continue;
        }
        let Some(body) = after.strip_prefix("${") else {
            lexer.feed('$');
            out.push('$');
            rest = &after[1..];
            continue;
        };
        let Some(end) = body.find('}') else {
            out.push_str(after);
            rest = "";
            break;
        };
        let inner = &body[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let valid_name =
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            "${".chars().for_each(|c| lexer.feed(c));
            out.push_str("${");
            rest = body;
            continue;
        }
        // A value stands for characters of the scalar it is in, never for quotes around it.
        let context = lexer.context_here();
        // The environment's value is data; a default is written in the config's own syntax.
        let value = match lookup(name).filter(|v| !v.is_empty()) {
            Some(v) => escaped(&v, context).ok_or(Problem::LineBreak),
            None => default.map(str::to_owned).ok_or(Problem::Missing),
        };
        match value {
            Ok(v) => {
                out.push_str(&v);
                lexer.feed('x');
            }
            Err(problem) => bad.push(BadVar {
                name: name.to_owned(),
                line,
                problem,
            }),
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    if bad.is_empty() {
        Ok(out)
    } else {
        Err(bad)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("9000".to_owned()),
            "TRICKY" => Some("a\"b\\n'c #d: e".to_owned()),
            "LINES" => Some("x\nadmin: { bind: 0.0.0.0:1 }".to_owned()),
            "TAB" => Some("a\tb\u{7}".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn variables_defaults_and_escapes_are_resolved() {
        let text = "a: ${PORT}\nb: ${HOST:-127.0.0.1}\nc: $$HOME\nd: $x";
        assert_eq!(
            interpolate(text, env).as_deref(),
            Ok("a: 9000\nb: 127.0.0.1\nc: $HOME\nd: $x")
        );
    }

    #[test]
    fn every_missing_variable_is_reported_with_its_line() {
        let err = interpolate("a: ${A}\n\nb: ${B}", env).expect_err("missing");
        let bad = |name: &str, line| BadVar {
            name: name.into(),
            line,
            problem: Problem::Missing,
        };
        assert_eq!(err, vec![bad("A", 1), bad("B", 3)]);
    }

    /// What a YAML parser reads back for `key` in `text` after interpolation.
    fn read_back(text: &str) -> Result<String, Vec<BadVar>> {
        let out = interpolate(text, env)?;
        let value: serde_json::Value =
            serde_saphyr::from_str(&out).unwrap_or_else(|e| panic!("{out:?} does not parse: {e}"));
        let key = &value["key"];
        let key = key.get(0).unwrap_or(key);
        Ok(key
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{out:?} gives {value}")))
    }

    #[test]
    fn values_read_back_as_themselves_inside_quoted_scalars() {
        let tricky = env("TRICKY").unwrap();
        assert_eq!(read_back("key: \"${TRICKY}\"").unwrap(), tricky);
        assert_eq!(
            read_back("key: \"<${TRICKY}>\"\nother: 1").unwrap(),
            format!("<{tricky}>")
        );
        assert_eq!(read_back("key: '${TRICKY}'").unwrap(), tricky);
        assert_eq!(
            read_back("key: 'it''s ${TRICKY}'").unwrap(),
            format!("it's {tricky}")
        );
        assert_eq!(read_back("{key: \"${TRICKY}\", b: 2}").unwrap(), tricky);
        assert_eq!(read_back("key: [\"${TRICKY}\", 'x']").unwrap(), tricky);
        assert_eq!(
            read_back("key: \"${LINES}\"").unwrap(),
            env("LINES").unwrap()
        );
        assert_eq!(read_back("key: \"${TAB}\"").unwrap(), env("TAB").unwrap());
        // A quote inside a plain scalar opens nothing, nor does one in a comment.
        assert_eq!(
            read_back("# it's \"here\nkey: it's \"${PORT}").unwrap(),
            "it's \"9000"
        );
        // A double-quoted scalar may span lines, escapes included.
        assert_eq!(
            read_back("key: \"a \\\"b\n  c ${TRICKY}\"").unwrap(),
            format!("a \"b c {tricky}")
        );
    }

    #[test]
    fn a_line_break_where_it_would_start_a_new_key_is_refused() {
        for (text, line) in [
            ("key: ${LINES}", 1),
            ("key: '${LINES}'", 1),
            ("key: x # ${LINES}", 1),
            ("key: |\n  \"${LINES}\n", 2),
        ] {
            let err = interpolate(text, env).expect_err(text);
            assert_eq!(
                err,
                vec![BadVar {
                    name: "LINES".into(),
                    line,
                    problem: Problem::LineBreak
                }],
                "{text:?}"
            );
        }
    }

    #[test]
    fn defaults_go_in_as_written() {
        assert_eq!(read_back("key: \"${UNSET:-a\\\"b}\"").unwrap(), "a\"b");
    }

    #[test]
    fn block_scalar_text_is_not_read_as_quotes() {
        // The `'` in the block would open a single-quoted scalar if read as YAML syntax.
        let text = "a: |\n  \"it\n\n  'is\nkey: \"${TRICKY}\"";
        assert_eq!(read_back(text).unwrap(), env("TRICKY").unwrap());
        let text = "- >-\n    'don\n- x\n";
        assert_eq!(interpolate(text, env).as_deref(), Ok(text));
        let text = "a: >-\n    'don\nkey: '${TRICKY}'";
        assert_eq!(read_back(text).unwrap(), env("TRICKY").unwrap());
    }
}
