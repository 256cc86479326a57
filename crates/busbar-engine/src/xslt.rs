//! The `xslt` step: XSLT 1.0 through libxslt, on the request (`in`) or the response (`out`).
//!
//! Stylesheets are compiled when the config is built and shared read-only by every worker.
//! A transform needs the whole body; small ones run inline, large ones on the blocking pool
//! behind a semaphore, so a long transform neither stalls the other connections of a worker's
//! event loop nor lets an unbounded number of threads pile up (callers wait: back-pressure).

use std::sync::{Arc, OnceLock};

use busbar_core::{Blame, Body, ErrorKind, Exchange, MediationError, MessageFormat};
use busbar_libxml::Stylesheet;
use http::header::{HeaderValue, CONTENT_TYPE};
use tokio::sync::Semaphore;

/// Bodies up to this size are transformed on the event loop. From the libxslt step costs in
/// docs/benchmarks.md, a 1 KB transform takes ~0.1–0.15 ms and a 10 KB one ~0.8 ms: handing
/// those to another thread costs more in wake-ups than it saves. At 16 KiB a transform is
/// about 1.3 ms, the longest stall we accept on an event loop; anything larger moves off it.
pub const INLINE_MAX_BYTES: usize = 16 * 1024;

/// Transforms running off the event loops at once: one per core keeps the cores busy
/// without the transforms competing with the event loops for them.
fn pool() -> &'static Semaphore {
    static POOL: OnceLock<Semaphore> = OnceLock::new();
    POOL.get_or_init(|| Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get())))
}

/// Runs `work` (a CPU-bound step on the current message's buffered body) inline when the body
/// is small, else on the blocking pool behind the semaphore.
pub(crate) async fn run_cpu_bound<T: Send + 'static>(
    ex: &mut Exchange,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, MediationError> {
    if ex.body_mut().exact_len().unwrap_or(0) as usize <= INLINE_MAX_BYTES {
        return Ok(work());
    }
    let _permit = pool()
        .acquire()
        .await
        .map_err(|e| MediationError::internal("CPU pool closed").with_source(e))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| MediationError::internal(format!("{} step failed", ex.proxy)).with_source(e))
}

/// A built `xslt` step.
#[derive(Debug)]
pub struct XsltStep {
    /// The compiled stylesheet.
    pub sheet: Arc<Stylesheet>,
    /// The stylesheet's path as written in the config (for faults and logs).
    pub name: Arc<str>,
    /// Parameters as XPath expressions (strings already quoted).
    pub params: Arc<Vec<(String, String)>>,
}

impl XsltStep {
    /// Transforms the current message's body.
    pub async fn apply(&self, ex: &mut Exchange, max_body: u64) -> Result<(), MediationError> {
        let input = ex.body_mut().bytes(max_body).await?;
        let sheet = self.sheet.clone();
        let params = self.params.clone();
        let run = move || sheet.transform_bytes(&input, &params);
        let result = run_cpu_bound(ex, run).await?;
        let out = result.map_err(|e| {
            let blame = match e.kind {
                busbar_libxml::ErrorKind::Parse
                | busbar_libxml::ErrorKind::Forbidden
                | busbar_libxml::ErrorKind::Limit => Blame::Client,
                _ => Blame::Internal,
            };
            let kind = if blame == Blame::Client {
                ErrorKind::BadRequest
            } else {
                ErrorKind::Internal
            };
            MediationError::new(
                kind,
                blame,
                format!(
                    "XSLT transformation with {} failed: {}",
                    self.name,
                    e.message.trim()
                ),
            )
            .with_source(e)
        })?;
        for m in &out.messages {
            tracing::info!(stylesheet = &*self.name, "xsl:message: {}", m.trim());
        }
        let content_type = self.content_type(ex, &out);
        // The output's SOAP version decides the fault format from here on.
        if let busbar_xml::Sniff::Soap(v) = busbar_xml::sniff_envelope(&out.bytes) {
            ex.format = MessageFormat::Soap(match v {
                busbar_xml::SoapVersion::V11 => busbar_core::SoapVersion::V11,
                busbar_xml::SoapVersion::V12 => busbar_core::SoapVersion::V12,
            });
        }
        ex.set_body(Body::full(out.bytes));
        if let Some(ct) = content_type {
            ex.headers_mut().insert(CONTENT_TYPE, ct);
        }
        Ok(())
    }

    /// `xsl:output media-type` wins; otherwise an XML message keeps its own Content-Type (a
    /// SOAP 1.2 message stays `application/soap+xml`), and anything else gets the output
    /// method's type.
    fn content_type(&self, ex: &Exchange, out: &busbar_libxml::Transformed) -> Option<HeaderValue> {
        let explicit = self.sheet.output().media_type.is_some();
        let current = ex.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let current_is_xml = current.is_some_and(|c| {
            let media = c
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            media.ends_with("/xml") || media.ends_with("+xml")
        });
        if !explicit && out.method == "xml" && current_is_xml {
            return None;
        }
        let charset = out.encoding.as_deref().unwrap_or("UTF-8");
        HeaderValue::from_str(&format!("{}; charset={charset}", out.media_type)).ok()
    }
}
