//! The `remove_header` step: removes a header from the current message. Config: the header's
//! name (`StepConfig::RemoveHeader`).

use busbar_core::{Exchange, Flow, MediationError};
use http::HeaderName;

use super::{Apply, BuildCx, Failed, StepCx};

/// A built `remove_header`.
#[derive(Debug)]
pub struct RemoveHeaderStep {
    name: HeaderName,
}

impl RemoveHeaderStep {
    /// Checks the name.
    pub fn build(name: &String, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => Ok(Self { name }),
            Err(_) => Err(cx.fail(None, here, format!("invalid header name '{name}'"))),
        }
    }
}

impl Apply for RemoveHeaderStep {
    async fn apply(&self, ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        ex.headers_mut().remove(&self.name);
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn every_value_of_the_header_is_removed() {
        let l = loaded(
            "sequences:\n  s:\n    - remove_header: x-a\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[("x-a", "1"), ("x-a", "2"), ("x-b", "3")], b"");
        assert!(run_steps(&steps, &mut ex).is_ok());
        assert!(ex.headers().get("x-a").is_none());
        assert_eq!(ex.headers()["x-b"], "3");
    }
}
