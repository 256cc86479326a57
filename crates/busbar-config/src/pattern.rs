//! Proxy path patterns: `/service/X` (exact), `/api/product/{id}` (a parameter matches one
//! non-empty segment) and `/api/orders/*` (a prefix: `/api/orders/` and everything below it).
//!
//! Parsed here so `validate` reports a bad pattern with its line; the engine's router matches
//! requests against the parsed form.

use std::fmt;
use std::sync::Arc;

/// One segment of a pattern (the text between two `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// Matches exactly this text, as sent (not percent-decoded). May be empty (`/a//b`, `/a/`).
    Literal(String),
    /// `{name}`: matches one non-empty segment, percent-decoded into the parameter `name`.
    Param(Arc<str>),
}

/// A parsed proxy path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    /// The segments after the leading `/`, in order (`/` alone is one empty literal).
    pub segments: Vec<Segment>,
    /// True for a prefix (`.../*`): the path must have at least one more segment.
    pub prefix: bool,
}

/// How specific a segment position is: compared from the left, the first difference decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    /// Covered by the `*` of a prefix.
    Rest,
    /// A parameter.
    Param,
    /// A literal segment.
    Literal,
}

impl PathPattern {
    /// Parses `text`: it starts with `/`; a segment is literal text, `{name}` (a whole segment,
    /// name of letters, digits and `_`, not starting with a digit, unique in the pattern), and
    /// the last segment may be `*`. `.` and `..` segments are refused (requests with them never
    /// match a pattern).
    pub fn parse(text: &str) -> Result<PathPattern, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("path '{text}' must start with '/'"));
        };
        // A request's path never holds these: a pattern with one would match nothing.
        if let Some(c) = text.chars().find(|c| matches!(c, '?' | '#')) {
            return Err(format!(
                "path '{text}': a path has no '{c}' (the query and the fragment are not part of it)"
            ));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "path '{}': a request's path has no spaces or control characters (percent-encode them)",
                text.escape_debug()
            ));
        }
        let raw: Vec<&str> = rest.split('/').collect();
        let mut segments = Vec::with_capacity(raw.len());
        let mut prefix = false;
        for (i, seg) in raw.iter().enumerate() {
            let last = i + 1 == raw.len();
            if *seg == "*" {
                if !last {
                    return Err(format!(
                        "path '{text}': '*' may only be the last segment (a prefix)"
                    ));
                }
                prefix = true;
                continue;
            }
            if *seg == "." || *seg == ".." {
                return Err(format!(
                    "path '{text}': '.' and '..' segments are not allowed"
                ));
            }
            if let Some(inner) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                if !is_name(inner) {
                    return Err(format!(
                        "path '{text}': invalid parameter name '{inner}' (letters, digits and '_', not starting with a digit)"
                    ));
                }
                if segments
                    .iter()
                    .any(|s| matches!(s, Segment::Param(p) if &**p == inner))
                {
                    return Err(format!("path '{text}': parameter '{inner}' appears twice"));
                }
                segments.push(Segment::Param(inner.into()));
            } else if seg.contains(['{', '}', '*']) {
                return Err(format!(
                    "path '{text}': a parameter '{{name}}' or a '*' must be a whole segment"
                ));
            } else {
                segments.push(Segment::Literal((*seg).to_owned()));
            }
        }
        Ok(PathPattern { segments, prefix })
    }

    /// True when the pattern is one exact path (no parameter, no prefix).
    pub fn is_exact(&self) -> bool {
        !self.prefix
            && self
                .segments
                .iter()
                .all(|s| matches!(s, Segment::Literal(_)))
    }

    /// The pattern's ranks, position by position, ending with [`Rank::Rest`] for a prefix.
    /// Of two patterns matching the same path, the greater sequence is the more specific.
    pub fn ranks(&self) -> Vec<Rank> {
        let mut out: Vec<Rank> = self
            .segments
            .iter()
            .map(|s| match s {
                Segment::Literal(_) => Rank::Literal,
                Segment::Param(_) => Rank::Param,
            })
            .collect();
        if self.prefix {
            out.push(Rank::Rest);
        }
        out
    }

    /// True when both patterns match exactly the same paths (parameter names aside).
    pub fn same_shape(&self, other: &PathPattern) -> bool {
        self.prefix == other.prefix
            && self.segments.len() == other.segments.len()
            && self
                .segments
                .iter()
                .zip(&other.segments)
                .all(|(a, b)| match (a, b) {
                    (Segment::Literal(x), Segment::Literal(y)) => x == y,
                    (Segment::Param(_), Segment::Param(_)) => true,
                    _ => false,
                })
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in &self.segments {
            match s {
                Segment::Literal(l) => write!(f, "/{l}")?,
                Segment::Param(p) => write!(f, "/{{{p}}}")?,
            }
        }
        if self.prefix {
            f.write_str("/*")?;
        }
        Ok(())
    }
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_into_literals_parameters_and_a_prefix() {
        let p = PathPattern::parse("/api/product/{id}").expect("parse");
        assert_eq!(
            p.segments,
            vec![
                Segment::Literal("api".into()),
                Segment::Literal("product".into()),
                Segment::Param("id".into())
            ]
        );
        assert!(!p.prefix && !p.is_exact());
        let p = PathPattern::parse("/api/orders/*").expect("parse");
        assert!(p.prefix);
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.to_string(), "/api/orders/*");
        assert!(PathPattern::parse("/service/X").expect("parse").is_exact());
        assert!(PathPattern::parse("/").expect("parse").is_exact());
        assert!(PathPattern::parse("/*").expect("parse").prefix);
    }

    #[test]
    fn bad_patterns_say_what_is_wrong() {
        for (bad, says) in [
            ("api", "must start with '/'"),
            ("/a/*/b", "may only be the last segment"),
            ("/a/{id}/{id}", "appears twice"),
            ("/a/{1x}", "invalid parameter name"),
            ("/a/{}", "invalid parameter name"),
            ("/a/x{id}", "whole segment"),
            ("/a/x*", "whole segment"),
            ("/a/../b", "'..' segments"),
        ] {
            let e = PathPattern::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn shapes_ignore_parameter_names() {
        let a = PathPattern::parse("/c/{id}").expect("a");
        let b = PathPattern::parse("/c/{key}").expect("b");
        let c = PathPattern::parse("/c/*").expect("c");
        assert!(a.same_shape(&b));
        assert!(!a.same_shape(&c));
        assert!(a.ranks() > c.ranks());
    }
}
