//! The `sequence` step: runs a named sequence. Config: the sequence's name
//! (`StepConfig::Sequence`). A named sequence is built once and shared by every step that
//! runs it.

use std::sync::Arc;

use busbar_config::{line_of, Spanned};
use busbar_core::{Exchange, Flow, MediationError};

use super::{run_nested, Apply, BuildCx, BuiltStep, Failed, StepCx};

/// A named, reusable list of steps.
#[derive(Debug, Default)]
pub struct Sequence {
    /// Its name.
    pub name: String,
    /// The steps, in order.
    pub steps: Vec<BuiltStep>,
}

/// A built `sequence`.
#[derive(Debug)]
pub struct SequenceStep {
    sequence: Arc<Sequence>,
}

impl SequenceStep {
    /// Builds (or reuses) the named sequence.
    pub fn build(name: &Spanned<String>, cx: &mut BuildCx<'_>, here: &str) -> Result<Self, Failed> {
        match cx.sequence(&name.value) {
            Some(sequence) => Ok(Self { sequence }),
            None if cx.is_building(&name.value) => Err(cx.fail(
                line_of(name),
                here,
                format!("sequence '{}' runs itself", name.value),
            )),
            None => Err(cx.fail(
                line_of(name),
                here,
                format!("unknown sequence '{}'", name.value),
            )),
        }
    }
}

impl Apply for SequenceStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        run_nested(&self.sequence.steps, ex, cx.proxy).await
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use busbar_core::Flow;

    #[test]
    fn a_named_sequence_runs_and_its_errors_name_the_inner_step() {
        let l = loaded(
            "sequences:\n  s:\n    - sequence: t\n  t:\n    - set_header: { name: x-a, value: '1' }\n    - fault: { reason: inner }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"");
        let e = run_steps(&steps, &mut ex)
            .err()
            .unwrap_or_else(|| panic!("no error"));
        assert_eq!(ex.headers()["x-a"], "1");
        assert_eq!(e.step.as_deref(), Some("sequences.t[1].fault"));
        let l = loaded(
            "sequences:\n  s:\n    - sequence: t\n  t:\n    - respond: {}\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            run_steps(&steps, &mut exchange(&[], b"")).ok(),
            Some(Flow::Respond)
        );
    }

    #[test]
    fn sequences_that_run_each_other_fail_to_build_instead_of_recursing() {
        let l = loaded(
            "sequences:\n  s:\n    - sequence: t\n  t:\n    - sequence: s\n",
            &std::env::temp_dir(),
        );
        let errs = build(&l).err().unwrap_or_else(|| panic!("built"));
        assert!(
            errs.iter().any(|e| e.contains("sequence 't' runs itself")),
            "{errs:#?}"
        );
    }
}
