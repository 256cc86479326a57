//! The `fault` step: answers with a fault (a SOAP fault of the request's version, or a JSON
//! problem). Config: `busbar_config::FaultConfig`.

use std::sync::Arc;

use busbar_config::{FaultCodeConfig, FaultConfig};
use busbar_core::{Blame, Exchange, Flow, MediationError};
use http::StatusCode;

use super::{Apply, BuildCx, Failed, StepCx};

/// A built `fault`.
#[derive(Debug)]
pub struct FaultStep {
    status: StatusCode,
    reason: Arc<str>,
    client: bool,
}

impl FaultStep {
    /// Checks the status.
    pub fn build(cfg: &FaultConfig, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        let status = StatusCode::from_u16(cfg.status)
            .map_err(|e| cx.fail(None, format!("{here}.status"), e.to_string()))?;
        Ok(Self {
            status,
            reason: cfg.reason.as_str().into(),
            client: cfg.code == FaultCodeConfig::Client,
        })
    }
}

impl Apply for FaultStep {
    async fn apply(&self, _ex: &mut Exchange, _cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let mut e = MediationError::policy(self.status, self.reason.to_string());
        if self.client {
            e.blame = Blame::Client;
        }
        Err(e)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use busbar_core::{Blame, MessageFormat};

    #[test]
    fn a_fault_fails_with_its_status_reason_code_and_path() {
        let l = loaded(
            "sequences:\n  s:\n    - fault: { status: 403, reason: nope, code: client }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"x");
        let e = run_steps(&steps, &mut ex)
            .err()
            .unwrap_or_else(|| panic!("no fault"));
        assert_eq!(e.status(MessageFormat::Problem), 403);
        assert_eq!(e.reason, "nope");
        assert_eq!(e.blame, Blame::Client);
        assert_eq!(e.step.as_deref(), Some("sequences.s[0].fault"));
    }
}
