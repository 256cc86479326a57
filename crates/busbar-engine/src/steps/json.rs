//! The JSON view of the current message that every JSON step shares: the body read (up to
//! `max_body`), checked strictly by `busbar-json` (grammar, UTF-8, numbers within f64's range,
//! nesting up to the proxy's `json_max_depth`, no duplicate member names), parsed once and
//! cached on the exchange until the body changes. Large bodies are parsed on the bounded CPU
//! pool.

use std::sync::Arc;

use busbar_core::{Blame, ErrorKind, Exchange, MediationError, Phase};
use busbar_json::{JsonError, Limits};
use serde_json::Value;

use super::StepCx;

/// A strictly checked, parsed JSON body, as cached on the exchange.
#[derive(Debug, Clone)]
pub struct StrictJson(pub Arc<Value>);

/// The limits the proxy's JSON steps apply.
pub fn limits(cx: &StepCx<'_>) -> Limits {
    Limits {
        max_depth: cx.proxy.json_max_depth,
        reject_duplicates: true,
    }
}

/// The current message's body as JSON (parsed at most once per body).
pub async fn parsed(ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Arc<Value>, MediationError> {
    if let Some(v) = ex.take_view::<StrictJson>() {
        let value = v.0.clone();
        ex.put_view(v);
        return Ok(value);
    }
    let phase = ex.phase();
    let bytes = ex.body_mut().bytes(cx.max_body()).await?;
    let limits = limits(cx);
    let size = bytes.len() as u64;
    let value = cx
        .offload(size, move || busbar_json::parse_strict(&bytes, limits))
        .await?
        .map_err(|e| malformed(phase, &e))?;
    let value = Arc::new(value);
    ex.put_view(StrictJson(value.clone()));
    Ok(value)
}

/// A JSON body refused: the client's fault in a request (400), the back end's in a response.
pub fn malformed(phase: Phase, e: &JsonError) -> MediationError {
    let (kind, blame) = match phase {
        Phase::Request => (ErrorKind::BadRequest, Blame::Client),
        Phase::Response => (ErrorKind::UpstreamReset, Blame::Upstream),
    };
    MediationError::new(kind, blame, format!("Malformed JSON: {e}"))
}
