//! The `json_select` step: the current message's JSON body becomes what a JSONPath selects,
//! the first node or the array of all of them. Config: `busbar_config::JsonSelectConfig`.

use std::sync::Arc;

use busbar_config::{line_of, JsonSelectConfig};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError};
use busbar_json::Query;
use http::header::{HeaderValue, CONTENT_TYPE};

use super::{json, Apply, BuildCx, Failed, StepCx};

/// A built `json_select`.
#[derive(Debug)]
pub struct JsonSelectStep {
    query: Arc<Query>,
    text: Arc<str>,
    first: bool,
}

impl JsonSelectStep {
    /// Compiles the path.
    pub fn build(
        config: &JsonSelectConfig,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        let query = Query::compile(&config.path.value).map_err(|e| {
            cx.fail(
                line_of(&config.path),
                format!("{here}.path"),
                format!("invalid JSONPath '{}': {e}", config.path.value),
            )
        })?;
        Ok(Self {
            query: Arc::new(query),
            text: config.path.value.as_str().into(),
            first: config.first,
        })
    }
}

impl Apply for JsonSelectStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let value = json::parsed(ex, cx).await?;
        let selected = if self.first {
            match self.query.first(&value) {
                Some(node) => serde_json::to_vec(node),
                None => {
                    return Err(MediationError::new(
                        ErrorKind::BadRequest,
                        Blame::Client,
                        format!("JSON field {} is missing", self.text),
                    ))
                }
            }
        } else {
            serde_json::to_vec(&self.query.all(&value))
        };
        let bytes = selected.map_err(|e| MediationError::internal(format!("JSON output: {e}")))?;
        ex.set_body(Body::full(bytes));
        ex.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    const ALL: &str =
        "sequences:\n  s:\n    - json_select: { path: \"$..[?(@.symbol == 'GOOG')].price\" }\n";
    const FIRST: &str = "sequences:\n  s:\n    - json_select: { path: \"$.a\", first: true }\n";

    fn run(yaml: &str, body: &str) -> Result<String, String> {
        answer(yaml, body)
    }

    #[test]
    fn every_node_or_the_first_becomes_the_body() {
        let doc = r#"{"payload":{"order":[{"symbol":"GOOG","price":42.8},{"symbol":"IBM","price":1},{"symbol":"GOOG","price":7}]}}"#;
        assert_eq!(run(ALL, doc).as_deref(), Ok("[42.8,7]"));
        assert_eq!(run(ALL, r#"{"payload":{"order":[]}}"#).as_deref(), Ok("[]"));
        assert_eq!(
            run(FIRST, r#"{"a":{"b":true}}"#).as_deref(),
            Ok(r#"{"b":true}"#)
        );
        assert_eq!(
            run(FIRST, r#"{"b":1}"#),
            Err("JSON field $.a is missing".to_owned())
        );
        let e = run(FIRST, r#"{"a":1,"a":2}"#).err().unwrap_or_default();
        assert!(e.contains("duplicate member name"), "{e}");
    }

    #[test]
    fn a_bad_path_is_a_build_error_with_its_line() {
        let yaml = "sequences:\n  s:\n    - json_select: { path: \"$[\" }\n";
        let errors = build(&loaded(yaml, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("t.yaml:5: sequences.s[0].json_select.path: invalid JSONPath"),
            "{errors:?}"
        );
    }
}
