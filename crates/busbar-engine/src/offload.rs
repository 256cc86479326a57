//! The one bounded pool for CPU-heavy step work: XSLT, full-XPath routing, WS-Security and
//! (later) jq and JSON⇄XML conversion.
//!
//! Small bodies run inline on the worker's event loop: from the libxslt step costs in
//! docs/benchmarks.md, a 1 KB transform takes ~0.1–0.15 ms and a 10 KB one ~0.8 ms, and
//! handing those to another thread costs more in wake-ups than it saves. At 16 KiB a transform
//! is about 1.3 ms, the longest stall we accept on an event loop; anything larger runs on the
//! blocking pool behind a semaphore with one permit per core, so long work neither stalls the
//! other connections of an event loop nor lets an unbounded number of threads pile up (callers
//! wait: back-pressure).

use std::sync::OnceLock;

use busbar_core::MediationError;
use tokio::sync::Semaphore;

/// Bodies up to this size are worked on inline, on the event loop.
pub const INLINE_MAX_BYTES: u64 = 16 * 1024;

/// The bounded CPU pool.
#[derive(Debug)]
pub struct Offload {
    permits: Semaphore,
    inline_max: u64,
}

impl Offload {
    /// The process's pool: one permit per core.
    pub fn shared() -> &'static Offload {
        static POOL: OnceLock<Offload> = OnceLock::new();
        POOL.get_or_init(|| Offload {
            permits: Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get())),
            inline_max: INLINE_MAX_BYTES,
        })
    }

    /// Runs `work` for a body of `size` bytes: inline up to [`INLINE_MAX_BYTES`], else on the
    /// blocking pool once a permit is free.
    pub async fn run<T: Send + 'static>(
        &self,
        size: u64,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, MediationError> {
        if size <= self.inline_max {
            return Ok(work());
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|e| MediationError::internal("CPU pool closed").with_source(e))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| MediationError::internal("CPU-bound step failed").with_source(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_work_runs_inline_and_large_work_on_another_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let here = std::thread::current().id();
        let pool = Offload::shared();
        let small = rt.block_on(pool.run(10, move || std::thread::current().id()));
        let large = rt.block_on(pool.run(1 << 20, move || std::thread::current().id()));
        assert_eq!(small.ok(), Some(here));
        assert!(large.is_ok_and(|id| id != here));
    }
}
