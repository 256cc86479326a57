//! `${NAME}` and `${NAME:-default}` in config text, resolved before the YAML is parsed.

/// A reference to an unset variable that has no default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingVar {
    /// The variable's name.
    pub name: String,
    /// 1-based line of the reference.
    pub line: usize,
}

/// Replaces `${NAME}` and `${NAME:-default}` with values from `lookup`; `$$` is a literal `$`.
///
/// Every unset variable without a default is reported, not just the first.
pub fn interpolate(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, Vec<MissingVar>> {
    let mut out = String::with_capacity(text.len());
    let mut missing = Vec::new();
    let mut line = 1;
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        let (before, after) = rest.split_at(i);
        line += before.matches('\n').count();
        out.push_str(before);
        if let Some(r) = after.strip_prefix("$$") {
            out.push('$');
            rest = r;
            continue;
        }
        let Some(body) = after.strip_prefix("${") else {
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
            out.push_str("${");
            rest = body;
            continue;
        }
        match lookup(name)
            .filter(|v| !v.is_empty())
            .or(default.map(str::to_owned))
        {
            Some(value) => out.push_str(&value),
            None => missing.push(MissingVar {
                name: name.to_owned(),
                line,
            }),
        }
        rest = &body[end + 1..];
    }
    out.push_str(rest);
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "PORT").then(|| "9000".to_owned())
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
        assert_eq!(
            err,
            vec![
                MissingVar {
                    name: "A".into(),
                    line: 1
                },
                MissingVar {
                    name: "B".into(),
                    line: 3
                }
            ]
        );
    }
}
