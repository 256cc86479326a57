//! The JSON view of the current message that every JSON step shares: the body read (up to
//! `max_body`), checked strictly by `busbar-json` (grammar, UTF-8, numbers within f64's range,
//! nesting up to the proxy's `json_max_depth`, no duplicate member names), parsed once and
//! cached on the exchange until the body changes. Large bodies are parsed on the bounded CPU
//! pool.

use std::sync::Arc;

use busbar_core::{Exchange, MediationError, Phase};
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
    let (kind, blame) = super::senders_fault(phase);
    MediationError::new(kind, blame, format!("Malformed JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use busbar_core::{Blame, Body, ErrorKind};

    use super::super::testing::{exchange, proxy_cx};
    use super::super::StepCx;
    use super::parsed;

    #[tokio::test(flavor = "current_thread")]
    async fn json_is_parsed_once_and_dropped_when_the_body_changes() {
        let proxy = proxy_cx();
        let path: Arc<str> = "s".into();
        let span = tracing::Span::none();
        let cx = StepCx {
            proxy: &proxy,
            path: &path,
            span: &span,
        };
        let mut ex = exchange(&[], br#"{"a": 1}"#);
        let first = parsed(&mut ex, &cx).await.unwrap_or_else(|e| panic!("{e}"));
        let second = parsed(&mut ex, &cx).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(Arc::ptr_eq(&first, &second), "parsed twice");
        ex.set_body(Body::full(&br#"{"a": 2}"#[..]));
        let third = parsed(&mut ex, &cx).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(third["a"], 2);
        let mut bad = exchange(&[], b"{\"a\": ");
        let e = parsed(&mut bad, &cx).await.err();
        assert!(e.is_some_and(|e| e.blame == Blame::Client && e.kind == ErrorKind::BadRequest));
    }
}
