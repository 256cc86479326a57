//! The `call` step: sends the current request to an endpoint; the response becomes the
//! current message. Config: `StepConfig::Call` (`busbar_config::CallConfig`: the endpoint's
//! name, or the endpoint with the method, path and body to send).

use std::sync::Arc;

use busbar_config::{line_of, CallBody, CallConfig, Spanned};
use busbar_core::{Body, Exchange, Flow, MediationError};
use http::Method;

use super::{Apply, BuildCx, Failed, StepCx};
use crate::endpoint::upstream::PathSuffix;
use crate::endpoint::Endpoint;

/// A built `call`.
#[derive(Debug)]
pub struct CallStep {
    endpoint: Arc<Endpoint>,
    method: Option<Method>,
    path: Option<Vec<Piece>>,
    no_body: bool,
}

/// A piece of a path template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Param(String),
}

/// `/stock/{id}` → text and parameter pieces.
fn template(path: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            pieces.push(Piece::Text(rest[..open].to_owned()));
        }
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("'{path}': a '{{' without its '}}'"))?;
        let name = &rest[open + 1..open + close];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("'{path}': '{{{name}}}' is not a parameter name"));
        }
        pieces.push(Piece::Param(name.to_owned()));
        rest = &rest[open + close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("'{path}': a '}}' without its '{{'"));
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_owned()));
    }
    Ok(pieces)
}

/// Percent-encodes a parameter as (part of) one path segment: everything but RFC 3986's
/// unreserved characters, so `/`, `?`, `#` and `%` cannot change the path's shape. A `.` stays
/// (`1.5`, `file.json`): only a whole `.` or `..` segment moves a path, and [`render`] escapes
/// those.
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Ends the segment of `out` that starts at `start`: when a parameter went into it and it is
/// a dot segment (`.` or `..`, which a server resolves against the path), its dots are
/// escaped, so it is a name and not a step up.
fn close_segment(out: &mut String, start: usize, has_param: bool) {
    if has_param && matches!(&out[start..], "." | "..") {
        let dots = out.len() - start;
        out.truncate(start);
        for _ in 0..dots {
            out.push_str("%2E");
        }
    }
}

/// The call path: `pieces` with the exchange's path parameters put in.
fn render(pieces: &[Piece], ex: &Exchange) -> Result<String, MediationError> {
    let mut out = String::new();
    // The segment being written: where it starts, and whether a parameter is in it.
    let (mut start, mut has_param) = (0, false);
    for p in pieces {
        match p {
            Piece::Text(t) => {
                // A `?` or `#` of the template ends the path's last segment as a `/`
                // ends one.
                let mut rest = t.as_str();
                while let Some(end) = rest.find(['/', '?', '#']) {
                    out.push_str(&rest[..end]);
                    close_segment(&mut out, start, has_param);
                    out.push_str(&rest[end..=end]);
                    (start, has_param) = (out.len(), false);
                    rest = &rest[end + 1..];
                }
                out.push_str(rest);
            }
            Piece::Param(name) => match ex.param(name) {
                Some(v) => {
                    out.push_str(&segment(v));
                    has_param = true;
                }
                None => {
                    return Err(MediationError::internal(format!(
                        "the call path needs the path parameter '{name}', which this route does not have"
                    )))
                }
            },
        }
    }
    close_segment(&mut out, start, has_param);
    Ok(out)
}

impl CallStep {
    /// Resolves the endpoint's name; compiles the path template.
    pub fn build(
        call: &Spanned<CallConfig>,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        let name = call.value.endpoint();
        let Some(endpoint) = cx.endpoints.get(name).cloned() else {
            // An endpoint in the config that is not built failed to build: its own problem is
            // reported at its keys, and the call to it is no second one.
            if cx.loaded.config.endpoints.contains_key(name) {
                return Err(Failed);
            }
            return Err(cx.fail(line_of(call), here, format!("unknown endpoint '{name}'")));
        };
        let mut step = CallStep {
            endpoint,
            method: None,
            path: None,
            no_body: false,
        };
        if let CallConfig::Shaped(shape) = &call.value {
            if let Some(m) = &shape.method {
                step.method = Some(Method::from_bytes(m.as_bytes()).map_err(|_| {
                    cx.fail(
                        line_of(call),
                        format!("{here}.method"),
                        format!("invalid method '{m}'"),
                    )
                })?);
            }
            if let Some(p) = &shape.path {
                step.path = Some(
                    template(p).map_err(|m| cx.fail(line_of(call), format!("{here}.path"), m))?,
                );
            }
            step.no_body = shape.body == CallBody::None;
        }
        Ok(step)
    }
}

impl Apply for CallStep {
    async fn apply(&self, ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        if ex.response.is_some() {
            return Err(MediationError::internal(
                "'call' after a response: only one call per exchange is supported",
            ));
        }
        if let Some(pieces) = &self.path {
            let suffix = render(pieces, ex)?;
            ex.request.extensions.insert(PathSuffix(suffix));
        }
        if let Some(m) = &self.method {
            ex.request.method = m.clone();
        }
        if self.no_body {
            ex.request_body = Body::empty();
            for h in [
                http::header::CONTENT_LENGTH,
                http::header::TRANSFER_ENCODING,
                http::header::CONTENT_TYPE,
            ] {
                ex.request.headers.remove(h);
            }
        }
        self.endpoint.call(ex).await?;
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::{render, segment, template, Piece};

    #[test]
    fn an_unknown_endpoint_is_a_build_error_at_the_steps_path() {
        let dir = std::env::temp_dir();
        let l = loaded("sequences:\n  s:\n    - call: nowhere\n", &dir);
        let errors = build(&l).err().unwrap_or_default();
        assert_eq!(
            errors,
            vec!["t.yaml:5: sequences.s[0].call: unknown endpoint 'nowhere'".to_owned()]
        );
    }

    #[test]
    fn path_templates_take_parameters_as_single_encoded_segments() {
        assert_eq!(
            template("/stock/{id}/x").ok(),
            Some(vec![
                Piece::Text("/stock/".into()),
                Piece::Param("id".into()),
                Piece::Text("/x".into())
            ])
        );
        assert!(template("/a/{id").is_err());
        assert!(template("/a/{}").is_err());
        assert!(template("/a/{b c}").is_err());
        assert!(template("/a/}").is_err());
        assert_eq!(segment("42"), "42");
        assert_eq!(segment("a b"), "a%20b");
        assert_eq!(segment("../x"), "..%2Fx");
        assert_eq!(segment("a/b?c#d%"), "a%2Fb%3Fc%23d%25");
        assert_eq!(segment("é"), "%C3%A9");
    }

    /// `template` filled with `params` as a route would have matched them.
    fn path_of(template_text: &str, params: &[(&str, &str)]) -> String {
        let mut ex = exchange(&[], b"");
        for (k, v) in params {
            ex.params.push(((*k).into(), (*v).to_owned()));
        }
        let pieces = template(template_text).expect("template");
        render(&pieces, &ex).expect("path")
    }

    #[test]
    fn dots_in_a_parameter_stay_unless_they_would_make_a_dot_segment() {
        let id = |v| path_of("/stock/{id}", &[("id", v)]);
        assert_eq!(id("1.5"), "/stock/1.5");
        assert_eq!(id("file.json"), "/stock/file.json");
        assert_eq!(id(".hidden"), "/stock/.hidden");
        assert_eq!(id("..."), "/stock/...");
        assert_eq!(id("."), "/stock/%2E");
        assert_eq!(id(".."), "/stock/%2E%2E");
        // A `/` in the value stays inside the segment, so nothing it holds can climb.
        assert_eq!(id("a/.."), "/stock/a%2F..");
        assert_eq!(id("../x"), "/stock/..%2Fx");
        // A dot segment made with the template's own text, or with two parameters, or ended
        // by the template's query.
        assert_eq!(path_of("/x/.{id}/y", &[("id", ".")]), "/x/%2E%2E/y");
        assert_eq!(path_of("/x/{a}{b}", &[("a", "."), ("b", ".")]), "/x/%2E%2E");
        assert_eq!(path_of("/x/{id}?v=1", &[("id", "..")]), "/x/%2E%2E?v=1");
        assert_eq!(path_of("/x/{id}#f", &[("id", ".")]), "/x/%2E#f");
        // The template's own dot segments are the config's, written as it wrote them.
        assert_eq!(path_of("/a/../{id}", &[("id", "b")]), "/a/../b");
    }
}
