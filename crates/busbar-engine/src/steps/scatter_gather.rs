//! The `scatter_gather` step: branches (each a step list, typically one shaped `call`) run
//! concurrently on copies of the request; their JSON answers are combined into one response.
//! Config: `busbar_config::ScatterGatherConfig`.
//!
//! The request body is read once (up to `max_body`) and shared by every branch as the same
//! bytes. Branches run as futures of the exchange's own task; dropping one (a failure under
//! `fail`, a timeout) abandons its back-end request, whose connection is then not reused.

use std::sync::Arc;
use std::time::Duration;

use busbar_config::{Aggregate, AggregateConfig, OnFailure, ScatterGatherConfig};
use busbar_core::{Blame, Body, ErrorKind, Exchange, Flow, MediationError};
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::{run_nested, Apply, BuildCx, BuiltStep, Failed, StepCx};

/// The header naming the branches missing from a `partial` answer.
pub static PARTIAL_HEADER: HeaderName = HeaderName::from_static("x-busbar-partial");

/// A built `scatter_gather`.
#[derive(Debug)]
pub struct ScatterGatherStep {
    branches: Vec<Branch>,
    aggregate: Aggregate,
    /// A jq program run on the object aggregate.
    jq: Option<Arc<busbar_jq::Program>>,
    timeout: Option<Duration>,
    branch_timeout: Option<Duration>,
    on_failure: OnFailure,
}

#[derive(Debug)]
struct Branch {
    name: Arc<str>,
    steps: Vec<BuiltStep>,
}

/// Why a branch has no result.
#[derive(Debug, Clone)]
struct BranchFailure {
    /// The HTTP status the branch ended with, when it got one.
    status: Option<u16>,
    reason: String,
    timed_out: bool,
}

impl ScatterGatherStep {
    /// Takes the branches' built steps.
    pub fn build(
        config: &ScatterGatherConfig,
        cx: &mut BuildCx<'_>,
        here: &str,
    ) -> Result<Self, Failed> {
        let mut lists = cx.take_children().into_iter();
        let (aggregate, jq) = match &config.aggregate {
            AggregateConfig::Kind(kind) => (*kind, None),
            AggregateConfig::Jq { jq } => match busbar_jq::Program::compile(jq, &["params"]) {
                Ok(p) => (Aggregate::Object, Some(Arc::new(p))),
                Err(e) => {
                    return Err(cx.fail(
                        None,
                        format!("{here}.aggregate.jq"),
                        format!("jq program, {e}"),
                    ))
                }
            },
        };
        let branches = config
            .branches
            .iter()
            .map(|b| Branch {
                name: b.name.as_str().into(),
                steps: lists.next().unwrap_or_default(),
            })
            .collect();
        Ok(ScatterGatherStep {
            branches,
            aggregate,
            jq,
            timeout: config.timeout.map(|d| d.0),
            branch_timeout: config.branch_timeout.map(|d| d.0),
            on_failure: config.on_failure,
        })
    }
}

/// A copy of the request for one branch: same head, path parameters, variables and trace,
/// the shared body.
fn branch_exchange(ex: &Exchange, body: &Option<bytes::Bytes>) -> Exchange {
    let mut b = http::Request::builder()
        .method(ex.request.method.clone())
        .uri(ex.request.uri.clone())
        .version(ex.request.version);
    if let Some(h) = b.headers_mut() {
        *h = ex.request.headers.clone();
    }
    let (parts, ()) = b
        .body(())
        .map(http::Request::into_parts)
        .unwrap_or_else(|_| http::Request::new(()).into_parts());
    let body = match body {
        Some(bytes) => Body::full(bytes.clone()),
        None => Body::empty(),
    };
    let mut copy = Exchange::new(parts, body, ex.proxy.clone());
    copy.params = ex.params.clone();
    copy.vars = ex.vars.clone();
    copy.trace = ex.trace.clone();
    copy
}

impl ScatterGatherStep {
    /// Runs one branch to its JSON result.
    async fn branch(
        &self,
        branch: &Branch,
        mut ex: Exchange,
        cx: &StepCx<'_>,
    ) -> Result<bytes::Bytes, BranchFailure> {
        let run = async {
            run_nested(&branch.steps, &mut ex, cx.proxy)
                .await
                .map_err(|e| BranchFailure {
                    status: Some(e.status(ex.format).as_u16()),
                    reason: e.reason.to_string(),
                    timed_out: e.kind == ErrorKind::ResponseTimeout,
                })?;
            let Some(resp) = ex.response.as_mut() else {
                return Err(BranchFailure {
                    status: None,
                    reason: "its steps gave no response".into(),
                    timed_out: false,
                });
            };
            let status = resp.status();
            let bytes = resp
                .body_mut()
                .bytes(cx.max_body())
                .await
                .map_err(|e| BranchFailure {
                    status: Some(status.as_u16()),
                    reason: format!("its answer could not be read: {e}"),
                    timed_out: false,
                })?;
            if !status.is_success() {
                return Err(BranchFailure {
                    status: Some(status.as_u16()),
                    reason: format!("the back end answered {status}"),
                    timed_out: false,
                });
            }
            // Checked as every JSON body is: an answer with a name twice would be embedded as
            // it came, and each reader of the aggregate would pick its own of the two values.
            busbar_json::check(&bytes, super::json::limits(cx)).map_err(|e| BranchFailure {
                status: Some(status.as_u16()),
                reason: format!("its answer is not JSON: {e}"),
                timed_out: false,
            })?;
            Ok(bytes)
        };
        match self.branch_timeout {
            Some(limit) => tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
                Err(BranchFailure {
                    status: None,
                    reason: format!("no answer within {limit:?}"),
                    timed_out: true,
                })
            }),
            None => run.await,
        }
    }
}

/// Appends `s` as a JSON string.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(serde_json::Value::from(s).to_string().as_bytes());
}

fn failure_json(f: &BranchFailure) -> Vec<u8> {
    let value = serde_json::json!({
        "error": { "status": f.status, "reason": f.reason }
    });
    value.to_string().into_bytes()
}

impl Apply for ScatterGatherStep {
    async fn apply(&self, ex: &mut Exchange, cx: &StepCx<'_>) -> Result<Flow, MediationError> {
        if ex.response.is_some() {
            return Err(MediationError::internal(
                "'scatter_gather' after a response: it answers the request itself",
            ));
        }
        // The body is read once and shared.
        let body = if ex.request_body.exact_len() == Some(0) {
            None
        } else {
            Some(ex.request_body.bytes(cx.max_body()).await?)
        };
        let n = self.branches.len();
        let mut results: Vec<Option<Result<bytes::Bytes, BranchFailure>>> = vec![None; n];
        let mut pending: FuturesUnordered<_> = self
            .branches
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let copy = branch_exchange(ex, &body);
                async move { (i, self.branch(b, copy, cx).await) }
            })
            .collect();
        let collect = async {
            while let Some((i, result)) = pending.next().await {
                let failed = result.is_err();
                results[i] = Some(result);
                if failed && self.on_failure == OnFailure::Fail {
                    // Dropping the others cancels them.
                    return;
                }
            }
        };
        let timed_out = match self.timeout {
            Some(limit) => tokio::time::timeout(limit, collect).await.is_err(),
            None => {
                collect.await;
                false
            }
        };
        drop(pending);
        let unfinished: Vec<&str> = self
            .branches
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(b, _)| &*b.name)
            .collect();
        if self.on_failure == OnFailure::Fail {
            if let Some((b, Some(Err(f)))) = self
                .branches
                .iter()
                .zip(&results)
                .find(|(_, r)| matches!(r, Some(Err(_))))
            {
                let mut e = MediationError::new(
                    if f.timed_out {
                        ErrorKind::ResponseTimeout
                    } else {
                        ErrorKind::UpstreamReset
                    },
                    Blame::Upstream,
                    format!("Branch '{}' failed: {}", b.name, f.reason),
                );
                e.status = Some(if f.timed_out {
                    StatusCode::GATEWAY_TIMEOUT
                } else {
                    StatusCode::BAD_GATEWAY
                });
                return Err(e);
            }
            if timed_out {
                return Err(timeout_error(&unfinished, self.timeout));
            }
        }
        // Partial (or every branch answered).
        let answered = results.iter().filter(|r| matches!(r, Some(Ok(_)))).count();
        if answered == 0 {
            if timed_out {
                return Err(timeout_error(&unfinished, self.timeout));
            }
            let mut e = MediationError::new(
                ErrorKind::UpstreamReset,
                Blame::Upstream,
                "No branch answered",
            );
            e.status = Some(StatusCode::BAD_GATEWAY);
            return Err(e);
        }
        let mut missing = Vec::new();
        let mut out = Vec::with_capacity(
            results
                .iter()
                .map(|r| match r {
                    Some(Ok(b)) => b.len() + 16,
                    _ => 64,
                })
                .sum::<usize>()
                + 2,
        );
        out.push(if self.aggregate == Aggregate::Object {
            b'{'
        } else {
            b'['
        });
        for (i, (b, r)) in self.branches.iter().zip(&results).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if self.aggregate == Aggregate::Object {
                push_json_string(&mut out, &b.name);
                out.push(b':');
            }
            match r {
                Some(Ok(bytes)) => out.extend_from_slice(bytes),
                Some(Err(f)) => {
                    missing.push(&*b.name);
                    out.extend_from_slice(&failure_json(f));
                }
                None => {
                    missing.push(&*b.name);
                    out.extend_from_slice(&failure_json(&BranchFailure {
                        status: None,
                        reason: "cancelled: the step's timeout ran out".into(),
                        timed_out: true,
                    }));
                }
            }
        }
        out.push(if self.aggregate == Aggregate::Object {
            b'}'
        } else {
            b']'
        });
        if let Some(program) = &self.jq {
            let params = serde_json::to_vec(&super::jq::params_object(ex))
                .unwrap_or_else(|_| b"{}".to_vec());
            let program = program.clone();
            let input = out;
            let size = input.len() as u64;
            out = cx
                .offload(size, move || program.run(&input, &[&params]))
                .await?
                .map_err(|e| {
                    MediationError::internal(format!("The aggregate of {} failed: {e}", cx.path))
                })?;
        }
        let mut resp = Response::new(Body::full(out));
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if !missing.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&missing.join(",")) {
                resp.headers_mut().insert(PARTIAL_HEADER.clone(), v);
            }
        }
        ex.response = Some(resp);
        Ok(Flow::Continue)
    }
}

fn timeout_error(unfinished: &[&str], limit: Option<Duration>) -> MediationError {
    let mut e = MediationError::new(
        ErrorKind::ResponseTimeout,
        Blame::Upstream,
        format!(
            "No answer within {:?} from branch(es) {}",
            limit.unwrap_or_default(),
            unfinished.join(", ")
        ),
    );
    e.status = Some(StatusCode::GATEWAY_TIMEOUT);
    e
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

    #[test]
    fn branches_are_built_with_their_paths_and_checked() {
        let yaml = "sequences:\n  s:\n    - scatter_gather:\n        branches:\n          - name: a\n            steps: [ { call: nowhere } ]\n";
        let errors = build(&loaded(yaml, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].contains("sequences.s[0].scatter_gather.branches[0].steps[0].call: unknown endpoint 'nowhere'"),
            "{errors:?}"
        );
    }

    #[test]
    fn a_jq_aggregate_reshapes_the_results() {
        let yaml = "sequences:\n  s:\n    - scatter_gather:\n        aggregate: { jq: '{total: (.a.x + .b[0]), names: (keys | join(\",\"))}' }\n        branches:\n          - name: a\n            steps: [ { respond: { body: '{\"x\":1}' } } ]\n          - name: b\n            steps: [ { respond: { body: '[2]' } } ]\n";
        let steps = build(&loaded(yaml, &std::env::temp_dir())).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"");
        run_steps(&steps, &mut ex).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(body_of(&mut ex), br#"{"total":3,"names":"a,b"}"#.to_vec());
        let bad = "sequences:\n  s:\n    - scatter_gather:\n        aggregate: { jq: '{a: }' }\n        branches:\n          - name: a\n            steps: [ { respond: {} } ]\n";
        let errors = build(&loaded(bad, &std::env::temp_dir()))
            .err()
            .unwrap_or_default();
        assert!(
            errors
                .iter()
                .any(|e| e.contains("sequences.s[0].scatter_gather.aggregate.jq: jq program")),
            "{errors:?}"
        );
    }

    #[test]
    fn respond_branches_aggregate_in_branch_order() {
        let yaml = "sequences:\n  s:\n    - scatter_gather:\n        aggregate: array\n        branches:\n          - name: a\n            steps: [ { respond: { body: '{\"x\":1}' } } ]\n          - name: b\n            steps: [ { respond: { body: '[true]' } } ]\n";
        let steps = build(&loaded(yaml, &std::env::temp_dir())).unwrap_or_else(|e| panic!("{e:?}"));
        let mut ex = exchange(&[], b"");
        run_steps(&steps, &mut ex).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(body_of(&mut ex), br#"[{"x":1},[true]]"#.to_vec());
    }
}
