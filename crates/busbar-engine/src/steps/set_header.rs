//! The `set_header` step: sets a header on the current message. Config:
//! `busbar_config::SetHeaderConfig`.

use busbar_config::SetHeaderConfig;
use busbar_core::{Exchange, Flow, MediationError};
use http::{HeaderName, HeaderValue};

use super::{Apply, BuildCx, Failed, StepCx};

/// A built `set_header`.
#[derive(Debug)]
pub struct SetHeaderStep {
    name: HeaderName,
    value: HeaderValue,
}

impl SetHeaderStep {
    /// Checks the name and value.
    pub fn build(cfg: &SetHeaderConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let name = HeaderName::from_bytes(cfg.name.as_bytes()).map_err(|_| {
            cx.fail(
                None,
                format!("{here}.name"),
                format!("invalid header name '{}'", cfg.name),
            )
        })?;
        let value = HeaderValue::from_str(&cfg.value)
            .map_err(|_| cx.fail(None, format!("{here}.value"), "invalid header value"))?;
        Ok(Self { name, value })
    }
}

impl Apply for SetHeaderStep {
    async fn apply(&self, ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        ex.headers_mut()
            .insert(self.name.clone(), self.value.clone());
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn the_header_is_set_on_the_current_message() {
        let l = loaded(
            "sequences:\n  s:\n    - set_header: { name: x-tier, value: gold }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[("x-tier", "lead")], b"");
        assert!(run_steps(&steps, &mut ex).is_ok());
        assert_eq!(ex.headers().get_all("x-tier").iter().count(), 1);
        assert_eq!(ex.headers()["x-tier"], "gold");
        ex.response = Some(http::Response::new(busbar_core::Body::empty()));
        assert!(run_steps(&steps, &mut ex).is_ok());
        assert_eq!(ex.headers()["x-tier"], "gold", "not set on the response");
    }
}
