//! The `log` step: writes a log line about the current message. Config:
//! `busbar_config::LogStepConfig`.

use busbar_config::{LogLevel, LogStepConfig};
use busbar_core::{Exchange, Flow, MediationError};
use tracing::Level;

use super::{Apply, BuildCx, Failed, StepCx};

/// A built `log`.
#[derive(Debug)]
pub struct LogStep {
    message: String,
    level: Level,
}

impl LogStep {
    /// Takes the message and level.
    pub fn build(cfg: &LogStepConfig, _cx: &mut BuildCx<'_>, _here: &str) -> Result<Self, Failed> {
        Ok(Self {
            message: cfg.message.clone(),
            level: match cfg.level {
                LogLevel::Error => Level::ERROR,
                LogLevel::Warn => Level::WARN,
                LogLevel::Info => Level::INFO,
                LogLevel::Debug => Level::DEBUG,
                LogLevel::Trace => Level::TRACE,
            },
        })
    }
}

impl Apply for LogStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        let method = &ex.request.method;
        let path = ex.request.uri.path();
        let proxy = &*ex.proxy;
        let step = &**cx.path;
        let status = ex.response.as_ref().map(|r| r.status().as_u16());
        let msg = &self.message;
        match self.level {
            Level::ERROR => tracing::error!(proxy, step, %method, path, ?status, "{msg}"),
            Level::WARN => tracing::warn!(proxy, step, %method, path, ?status, "{msg}"),
            Level::INFO => tracing::info!(proxy, step, %method, path, ?status, "{msg}"),
            Level::DEBUG => tracing::debug!(proxy, step, %method, path, ?status, "{msg}"),
            Level::TRACE => tracing::trace!(proxy, step, %method, path, ?status, "{msg}"),
        }
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use busbar_core::Flow;

    #[test]
    fn log_continues_and_leaves_the_message_alone() {
        let l = loaded(
            "sequences:\n  s:\n    - log: { message: hello, level: debug }\n",
            &std::env::temp_dir(),
        );
        let steps = build(&l).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[("x-a", "1")], b"body");
        assert_eq!(run_steps(&steps, &mut ex).ok(), Some(Flow::Continue));
        assert_eq!(body_of(&mut ex), b"body");
        assert_eq!(ex.headers()["x-a"], "1");
    }
}
