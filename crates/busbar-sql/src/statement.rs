//! SQL text with named parameters (`:name`), rewritten once into each database's positional
//! form: `?1` for SQLite, `$1` for PostgreSQL. Values are always bound, never spliced in.

/// A statement as configured, with its parameters' names in the order of their positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The text as written.
    pub text: String,
    /// Parameter names; position `i` (1-based `i + 1`) binds `names[i]`.
    pub names: Vec<String>,
    sqlite: String,
    postgres: String,
}

impl Statement {
    /// Parses `text`, finding `:name` parameters outside string literals, quoted identifiers,
    /// comments and PostgreSQL's `::` casts. A name used twice binds one position.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut names: Vec<String> = Vec::new();
        let mut sqlite = String::with_capacity(text.len());
        let mut postgres = String::with_capacity(text.len());
        let b = text.as_bytes();
        let mut i = 0;
        let mut copied = 0;
        while i < b.len() {
            match b[i] {
                q @ (b'\'' | b'"' | b'`') => {
                    i = skip_quoted(b, i, q)
                        .ok_or_else(|| format!("unterminated {} at offset {i}", quoted_name(q)))?;
                }
                b'-' if b.get(i + 1) == Some(&b'-') => {
                    i = b[i..]
                        .iter()
                        .position(|&c| c == b'\n')
                        .map_or(b.len(), |n| i + n + 1);
                }
                b'/' if b.get(i + 1) == Some(&b'*') => {
                    let end = text[i + 2..]
                        .find("*/")
                        .ok_or_else(|| format!("unterminated comment at offset {i}"))?;
                    i += 2 + end + 2;
                }
                b':' if b.get(i + 1) == Some(&b':') => i += 2,
                b':' if b
                    .get(i + 1)
                    .is_some_and(|&c| c == b'_' || c.is_ascii_alphabetic()) =>
                {
                    let start = i + 1;
                    let mut end = start;
                    while end < b.len() && (b[end] == b'_' || b[end].is_ascii_alphanumeric()) {
                        end += 1;
                    }
                    let name = &text[start..end];
                    let pos = match names.iter().position(|n| n == name) {
                        Some(p) => p + 1,
                        None => {
                            names.push(name.to_owned());
                            names.len()
                        }
                    };
                    sqlite.push_str(&text[copied..i]);
                    postgres.push_str(&text[copied..i]);
                    sqlite.push_str(&format!("?{pos}"));
                    postgres.push_str(&format!("${pos}"));
                    copied = end;
                    i = end;
                }
                b'?' | b'$'
                    if b.get(i + 1).is_some_and(u8::is_ascii_digit)
                        && (i == 0 || !is_word(b[i - 1])) =>
                {
                    return Err(format!(
                        "positional parameter at offset {i}: name parameters as :name and bind them in 'params'"
                    ));
                }
                _ => i += 1,
            }
        }
        sqlite.push_str(&text[copied..]);
        postgres.push_str(&text[copied..]);
        if text.trim().is_empty() {
            return Err("the statement is empty".into());
        }
        Ok(Self {
            text: text.to_owned(),
            names,
            sqlite,
            postgres,
        })
    }

    /// The text for SQLite (`?N` parameters).
    pub fn sqlite(&self) -> &str {
        &self.sqlite
    }

    /// The text for PostgreSQL (`$N` parameters).
    pub fn postgres(&self) -> &str {
        &self.postgres
    }
}

fn is_word(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

fn quoted_name(q: u8) -> &'static str {
    match q {
        b'\'' => "string literal",
        _ => "quoted identifier",
    }
}

/// The index after the quoted run starting at `start` (a doubled quote is an escaped one).
fn skip_quoted(b: &[u8], start: usize, q: u8) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_positions_for_each_database() {
        let s = Statement::parse(
            "SELECT * FROM t WHERE a = :a AND b > :b_2 OR c = :a -- :not\n AND d = ':nor' AND e::text = \"x:y\" /* :no */",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.names, ["a", "b_2"]);
        assert_eq!(
            s.sqlite(),
            "SELECT * FROM t WHERE a = ?1 AND b > ?2 OR c = ?1 -- :not\n AND d = ':nor' AND e::text = \"x:y\" /* :no */"
        );
        assert!(s
            .postgres()
            .starts_with("SELECT * FROM t WHERE a = $1 AND b > $2 OR c = $1"));
        assert!(s.postgres().contains("e::text"));
    }

    #[test]
    fn escaped_quotes_and_casts_of_parameters() {
        let s =
            Statement::parse("SELECT 'it''s :x', :v::numeric").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.names, ["v"]);
        assert_eq!(s.postgres(), "SELECT 'it''s :x', $1::numeric");
    }

    #[test]
    fn bad_statements_are_refused() {
        for (sql, want) in [
            ("SELECT 'open", "unterminated string literal"),
            ("SELECT \"open", "unterminated quoted identifier"),
            ("SELECT 1 /* open", "unterminated comment"),
            ("SELECT ?1", "positional parameter"),
            ("SELECT $1", "positional parameter"),
            ("  ", "empty"),
        ] {
            let e = Statement::parse(sql).err().unwrap_or_default();
            assert!(e.contains(want), "{sql}: {e}");
        }
        // `$` inside a word (an identifier such as a$1) is not a parameter.
        assert!(Statement::parse("SELECT a$1 FROM t").is_ok());
    }
}
