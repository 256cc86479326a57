//! The `call` step: sends the current request to an endpoint; the response becomes the
//! current message. Config: `StepConfig::Call` (the endpoint's name).

use std::sync::Arc;

use busbar_config::{line_of, Spanned};
use busbar_core::{Exchange, Flow, MediationError};

use super::{Apply, BuildCx, Failed, StepCx};
use crate::endpoint::Endpoint;

/// A built `call`.
#[derive(Debug)]
pub struct CallStep {
    endpoint: Arc<Endpoint>,
}

impl CallStep {
    /// Resolves the endpoint's name.
    pub fn build(name: &Spanned<String>, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        match cx.endpoints.get(&name.value) {
            Some(endpoint) => Ok(Self {
                endpoint: endpoint.clone(),
            }),
            None => Err(cx.fail(
                line_of(name),
                here,
                format!("unknown endpoint '{}'", name.value),
            )),
        }
    }
}

impl Apply for CallStep {
    async fn apply(&self, ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        if ex.response.is_some() {
            return Err(MediationError::internal(
                "'call' after a response: only one call per exchange is supported",
            ));
        }
        self.endpoint.call(ex).await?;
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
