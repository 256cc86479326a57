//! The `jq` step: the current message's JSON body through a jq program compiled when the
//! config is built. Config: `busbar_config::JqConfig`.
//!
//! The program sees `$params` (the route's path parameters), `$query` (the query string's
//! parameters, percent-decoded, the first of a repeated name), `$headers` (the current
//! message's headers by lower-case name; repeated ones joined with ", ") and `$vars` (the
//! exchange's text variables; byte variables as base64). It must give exactly one value,
//! which becomes the body (`Content-Type: application/json`).

use std::sync::Arc;

use base64::Engine as _;
use busbar_config::{line_of, JqConfig, Spanned};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError, Phase, Var};
use busbar_jq::{Program, RunError, Strict};
use http::header::{HeaderValue, CONTENT_TYPE};
use serde_json::{Map, Value};

use super::{json, Apply, BuildCx, Failed, StepCx, StepEngine};
use crate::router::query_decode;

/// The variables every program gets, in this order.
const VARS: [&str; 4] = ["params", "query", "headers", "vars"];

/// A built `jq` step.
#[derive(Debug)]
pub struct JqStep {
    program: Arc<Program>,
    /// Which of [`VARS`] the program mentions: the others are passed as `null`, unbuilt.
    uses: [bool; 4],
}

impl JqStep {
    /// Reads (for `file`) and compiles the program.
    pub fn build(
        config: &Spanned<JqConfig>,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        // Lines come from the step (the short form's string sits on it).
        let step_line = line_of(config);
        let (source, line, at) = match &config.value {
            JqConfig::Inline(p) => (p.value.clone(), step_line, here.to_owned()),
            JqConfig::Full(s) => match (&s.program, &s.file) {
                (Some(p), None) => (
                    p.value.clone(),
                    line_of(p).or(step_line),
                    format!("{here}.program"),
                ),
                (None, Some(f)) => {
                    let path = cx.loaded.resolve(&f.value);
                    match busbar_core::file::read_to_string(&path) {
                        Ok(text) => (text, line_of(f).or(step_line), format!("{here}.file")),
                        Err(e) => {
                            return Err(cx.fail(
                                line_of(f).or(step_line),
                                format!("{here}.file"),
                                format!("cannot read {}: {e}", path.display()),
                            ))
                        }
                    }
                }
                _ => {
                    return Err(cx.fail(step_line, here, "give exactly one of 'program' or 'file'"))
                }
            },
        };
        let uses = VARS.map(|v| source.contains(&format!("${v}")));
        match Program::compile(&source, &VARS) {
            Ok(program) => {
                cx.engines.push(StepEngine {
                    step: here.to_owned(),
                    subject: match &config.value {
                        JqConfig::Full(s) => s.file.as_ref().map(|f| f.value.clone()),
                        JqConfig::Inline(_) => None,
                    }
                    .unwrap_or_else(|| "its program".to_owned()),
                    fast: program.fast_path().map_err(str::to_owned),
                    general: "jaq",
                });
                Ok(JqStep {
                    program: Arc::new(program),
                    uses,
                })
            }
            Err(e) => Err(cx.fail(line, at, format!("jq program, {e}"))),
        }
    }
}

/// The variables of a run, as JSON texts in [`VARS`] order (`null` for those not used).
fn variables(ex: &Exchange, uses: [bool; 4]) -> [Vec<u8>; 4] {
    let params = params_object(ex);
    let mut query = Map::new();
    if let Some(q) = ex.request.uri.query() {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (k, v) = (query_decode(k), query_decode(v));
            query.entry(k).or_insert(Value::String(v));
        }
    }
    let mut headers: Map<String, Value> = Map::new();
    for (name, value) in ex.headers() {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.get_mut(name.as_str()) {
            Some(Value::String(s)) => {
                s.push_str(", ");
                s.push_str(&text);
            }
            _ => {
                headers.insert(name.as_str().to_owned(), Value::String(text));
            }
        }
    }
    let vars: Map<String, Value> = ex
        .vars
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Var::Text(t) => t.clone(),
                Var::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b),
            };
            (k.clone(), Value::String(value))
        })
        .collect();
    let mut used = uses.into_iter();
    [params, query, headers, vars].map(|m| {
        if used.next().unwrap_or(true) {
            serde_json::to_vec(&Value::Object(m)).unwrap_or_default()
        } else {
            b"null".to_vec()
        }
    })
}

/// The route's path parameters as a JSON object (`$params`).
pub(super) fn params_object(ex: &Exchange) -> Map<String, Value> {
    ex.params
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
        .collect()
}

impl Apply for JqStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let phase = ex.phase();
        let bytes = ex.body_mut().bytes(cx.max_body()).await?;
        let vars = variables(ex, self.uses);
        let limits = json::limits(cx);
        let program = self.program.clone();
        let size = bytes.len() as u64;
        let result = cx
            .offload(size, move || {
                let refs: Vec<&[u8]> = vars.iter().map(Vec::as_slice).collect();
                let strict = Strict {
                    max_depth: limits.max_depth,
                    reject_duplicates: limits.reject_duplicates,
                };
                // Strict input within the limits is read once, by the fast interpreter;
                // anything else is checked (for its error) and goes to jaq.
                if let Some(result) = program.run_strict(&bytes, &refs, strict) {
                    return result.map_err(Ok);
                }
                busbar_json::check(&bytes, limits).map_err(Err)?;
                program.run_jaq(&bytes, &refs).map_err(Ok)
            })
            .await?;
        let out = match result {
            Ok(out) => out,
            Err(Err(json_error)) => return Err(json::malformed(phase, &json_error)),
            Err(Ok(RunError::Input(m))) => {
                let (kind, blame) = match phase {
                    Phase::Request => (ErrorKind::BadRequest, Blame::Client),
                    Phase::Response => (ErrorKind::UpstreamReset, Blame::Upstream),
                };
                return Err(MediationError::new(
                    kind,
                    blame,
                    format!("Malformed JSON: {m}"),
                ));
            }
            Err(Ok(e)) => {
                return Err(MediationError::internal(format!(
                    "The jq step {} failed: {e}",
                    cx.path
                )))
            }
        };
        ex.set_body(Body::full(out));
        ex.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    fn run(program: &str, body: &str) -> Result<String, String> {
        let yaml = format!("sequences:\n  s:\n    - jq: '{program}'\n");
        let steps = build(&loaded(&yaml, &std::env::temp_dir())).map_err(|e| format!("{e:?}"))?;
        let mut ex = exchange(
            &[("X-Tier", "gold"), ("x-multi", "a"), ("x-multi", "b")],
            body.as_bytes(),
        );
        ex.params = vec![("id".into(), "a b/c".to_owned())];
        ex.vars
            .insert("v".into(), busbar_core::Var::Text("t".into()));
        match run_steps(&steps, &mut ex) {
            Ok(_) => Ok(String::from_utf8_lossy(&body_of(&mut ex)).into_owned()),
            Err(e) => Err(e.reason.to_string()),
        }
    }

    #[test]
    fn the_program_sees_params_query_headers_and_vars() {
        assert_eq!(
            run(
                "{id: $params.id, tier: $headers[\"x-tier\"], m: $headers[\"x-multi\"], q: $query.x, v: $vars.v, n: .n}",
                r#"{"n":1.50}"#
            )
            .as_deref(),
            Ok(r#"{"id":"a b/c","tier":"gold","m":"a, b","q":"1","v":"t","n":1.50}"#)
        );
    }

    #[test]
    fn failures_are_errors_naming_the_step_or_the_input() {
        let e = run(".[]", "[1,2]").err().unwrap_or_default();
        assert_eq!(
            e,
            "The jq step sequences.s[0].jq failed: the program gave 2 values (it must give one)"
        );
        let e = run(".a.b", "[1]").err().unwrap_or_default();
        assert!(
            e.starts_with("The jq step sequences.s[0].jq failed: "),
            "{e}"
        );
        let e = run(".", "{\"a\":1,\"a\":2}").err().unwrap_or_default();
        assert!(e.contains("duplicate member name"), "{e}");
        let e = run(".", "not json").err().unwrap_or_default();
        assert!(e.starts_with("Malformed JSON"), "{e}");
    }

    #[test]
    fn compile_errors_are_build_errors_with_the_programs_position() {
        let yaml = "sequences:\n  s:\n    - jq: '{a: $nope}'\n";
        let errors = build(&loaded(yaml, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with(
                "t.yaml:5: sequences.s[0].jq: jq program, line 1, column 5: undefined"
            ),
            "{errors:?}"
        );
        let yaml = "sequences:\n  s:\n    - jq: { file: no-such.jq }\n";
        let errors = build(&loaded(yaml, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert!(
            errors[0].contains("sequences.s[0].jq.file: cannot read"),
            "{errors:?}"
        );
    }
}
