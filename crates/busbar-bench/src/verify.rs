//! `bench verify`: the corruption checker (docs/scenarios.md). Every scenario × many sizes
//! (straddling 8 KiB, 16 KiB and 64 KiB, up to 1 MiB) × each concurrency, plus the negative
//! cases each router must reject with the exact SOAP fault; in the integrator suite, every
//! answer checked for its content (routing, mappings, aggregates), plus each router's other
//! branch.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::check::{Check, Scenario, Suite, FAULT_NOT_IBM, FAULT_ROUTING, FAULT_SECURITY_CHECK};
use crate::client::{RequestSpec, Url};
use crate::error::BenchError;
use crate::integrator::{self, Shape};
use crate::load::{self, LoadPlan, Requests, StopRule};
use crate::payload::{buy_stocks, soap_action, Variant};
use crate::secure::{tamper_signature, Feed, SecureClient};
use crate::util::{parse_count, parse_positive_duration, parse_size};

/// Sizes `bench verify` checks by default.
pub const DEFAULT_SIZES: [usize; 17] = [
    512, 1024, 5120, 8191, 8192, 8193, 10_240, 16_280, 16_383, 16_384, 16_385, 16_488, 65_535,
    65_536, 65_537, 102_400, 1_048_576,
];

/// Product ids a ScatterGather check goes through (four of them percent-encoded).
pub const VERIFY_PRODUCTS: usize = 40;

/// Options of `bench verify`.
#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    /// Base URL the scenarios are under: the proxy names of the classic suite, e.g.
    /// http://127.0.0.1:8280/service; the paths of the integrator suite, e.g.
    /// http://127.0.0.1:8281/api; the services of the bpel suite, e.g.
    /// http://127.0.0.1:8283/service.
    pub base_url: String,
    /// Scenario suite: `classic` (SOAP), `integrator` (JSON/REST) or `bpel` (orchestration).
    #[arg(long, default_value = "classic")]
    pub suite: Suite,
    /// Scenarios to check, comma-separated (default: every one of the suite but the
    /// WS-Security and database ones); `bpel` names the four SimpleInvoke processes.
    #[arg(long, value_parser = Scenario::parse_list)]
    pub scenarios: Option<::std::vec::Vec<Scenario>>,
    /// The bpel suite: the SimpleInvoke processes to check by x, the number of HelloWorld
    /// calls: `0..3` (all, the default), `1`, `0,2`.
    #[arg(long, value_parser = crate::bpel::parse_x)]
    pub x: Option<::std::vec::Vec<u8>>,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "1,50")]
    pub concurrency: Vec<usize>,
    /// Sizes to check (default: 512 B … 1 MiB around the 8/16/64 KiB boundaries).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Option<Vec<usize>>,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Write the result table as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// WS-Security scenarios: the directory holding client.p12, server.pem and ca.pem.
    #[arg(long)]
    pub keys: Option<std::path::PathBuf>,
}

/// One checked case.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CaseResult {
    /// Scenario name.
    pub scenario: String,
    /// `positive`, or the negative case's name.
    pub case: String,
    /// Request body size.
    pub size: usize,
    /// Concurrency.
    pub concurrency: usize,
    /// Requests sent.
    pub requests: u64,
    /// Requests answered as expected.
    pub passed: u64,
    /// Whether every request passed.
    pub ok: bool,
    /// The first problem seen.
    pub detail: Option<String>,
}

/// All results of one verify run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct VerifyReport {
    /// Base URL checked.
    pub base_url: String,
    /// One row per case.
    pub cases: Vec<CaseResult>,
}

impl VerifyReport {
    /// True when every case passed.
    pub fn all_passed(&self) -> bool {
        !self.cases.is_empty() && self.cases.iter().all(|c| c.ok)
    }

    /// The pass/fail table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<22} {:<26} {:>8} {:>4} {:>6}  result\n",
            "scenario", "case", "size", "c", "n"
        );
        for c in &self.cases {
            out.push_str(&format!(
                "{:<22} {:<26} {:>8} {:>4} {:>6}  {}{}\n",
                c.scenario,
                c.case,
                c.size,
                c.concurrency,
                c.requests,
                if c.ok { "PASS" } else { "FAIL" },
                c.detail
                    .as_deref()
                    .map(|d| format!(" ({d})"))
                    .unwrap_or_default()
            ));
        }
        let failed = self.cases.iter().filter(|c| !c.ok).count();
        out.push_str(&format!(
            "{} cases, {} passed, {} failed\n",
            self.cases.len(),
            self.cases.len() - failed,
            failed
        ));
        out
    }
}

/// Requests and the answers they must get.
struct Case {
    scenario: Scenario,
    name: &'static str,
    size: usize,
    /// Sent in turn (one, or a rotation such as JsonCBR's two tiers).
    requests: Vec<(RequestSpec, Check)>,
    /// WS-Security: fresh secured requests are built from the first spec for each run.
    secure: Option<Arc<SecureClient>>,
    /// `db-write`: fresh writes for each run, read back after it.
    db_write: bool,
}

/// A case of one request.
fn one(
    scenario: Scenario,
    name: &'static str,
    size: usize,
    spec: RequestSpec,
    check: Check,
) -> Case {
    Case {
        scenario,
        name,
        size,
        requests: vec![(spec, check)],
        secure: None,
        db_write: false,
    }
}

/// The integrator cases: the positive rotation at each size (ScatterGather, without a body,
/// once), then each router's other branch at two sizes. Each size has its own seed, so the
/// documents' values (tiers, prices) vary across sizes.
fn integrator_cases(
    scenario: Scenario,
    base: &str,
    sizes: &[usize],
) -> Result<Vec<Case>, BenchError> {
    let url = Url::parse(&scenario.url(base)).map_err(BenchError::Usage)?;
    let shape = |i: usize, size| Shape {
        size,
        seed: 1 + i as u64,
        products: VERIFY_PRODUCTS,
    };
    let sizes: Vec<usize> = if scenario.sized() {
        sizes.to_vec()
    } else {
        vec![0]
    };
    let mut cases = Vec::new();
    if scenario == Scenario::DbWrite {
        return Ok(vec![Case {
            scenario,
            name: "positive",
            size: 0,
            requests: vec![(RequestSpec::json(url, b"{}".to_vec()), Check::Status200)],
            secure: None,
            db_write: true,
        }]);
    }
    for (i, &size) in sizes.iter().enumerate() {
        let requests =
            integrator::requests(scenario, &url, shape(i, size)).map_err(BenchError::Usage)?;
        cases.push(Case {
            scenario,
            name: "positive",
            size,
            requests,
            secure: None,
            db_write: false,
        });
    }
    for (i, size) in [1024, 16_385].into_iter().enumerate() {
        let variants =
            integrator::variants(scenario, &url, shape(i, size)).map_err(BenchError::Usage)?;
        for (name, spec, check) in variants {
            cases.push(one(scenario, name, size, spec, check));
        }
    }
    Ok(cases)
}

fn cases_for(
    scenario: Scenario,
    base: &str,
    sizes: &[usize],
    keys: Option<&std::path::Path>,
) -> Result<Vec<Case>, BenchError> {
    match scenario.suite() {
        Suite::Integrator => return integrator_cases(scenario, base, sizes),
        Suite::Bpel => {
            let url = Url::parse(&scenario.url(base)).map_err(BenchError::Usage)?;
            let requests = crate::bpel::requests(scenario, &url, crate::bpel::VERIFY_NAMES)
                .map_err(BenchError::Usage)?;
            return Ok(vec![Case {
                scenario,
                name: "positive",
                size: 0,
                requests,
                secure: None,
                db_write: false,
            }]);
        }
        Suite::Classic => {}
    }
    let url = Url::parse(&scenario.url(base)).map_err(BenchError::Usage)?;
    let usage = |e: crate::payload::PayloadError| BenchError::Usage(e.to_string());
    let mut cases = Vec::new();
    if let Some(profile) = scenario.secure_profile() {
        let keys =
            keys.ok_or_else(|| BenchError::Usage(format!("scenario {scenario} needs --keys DIR")))?;
        let client = Arc::new(SecureClient::load(keys, profile)?);
        for &size in sizes {
            let body = buy_stocks(size, Variant::Plain).map_err(usage)?;
            cases.push(Case {
                secure: Some(client.clone()),
                ..one(
                    scenario,
                    "positive",
                    size,
                    RequestSpec::soap(url.clone(), body, soap_action(size)),
                    Check::Status200,
                )
            });
        }
        for size in [1024, 16_385] {
            let body = buy_stocks(size, Variant::Plain).map_err(usage)?;
            let (message, _) = client.message(&body).map_err(BenchError::Failed)?;
            cases.push(one(
                scenario,
                "tampered-signature",
                size,
                RequestSpec::soap(url.clone(), tamper_signature(&message)?, soap_action(size)),
                Check::Fault {
                    status: 500,
                    reason: FAULT_SECURITY_CHECK,
                },
            ));
        }
        return Ok(cases);
    }
    for &size in sizes {
        let body = buy_stocks(size, Variant::Plain).map_err(usage)?;
        let check = Check::for_scenario(scenario, &body).map_err(BenchError::Failed)?;
        let spec = RequestSpec::soap(url.clone(), body, soap_action(size));
        cases.push(one(scenario, "positive", size, spec, check));
    }
    let negative_sizes = [1024, 16_385];
    for size in negative_sizes {
        let mut negative =
            |name: &'static str, variant: Variant, header: Option<String>, reason| {
                let body = buy_stocks(size, variant).map_err(usage)?;
                let mut spec = RequestSpec::soap(url.clone(), body, soap_action(size));
                if let Some(h) = header {
                    spec.apply_header_option(&h).map_err(BenchError::Usage)?;
                }
                let check = Check::Fault {
                    status: 500,
                    reason,
                };
                cases.push(one(scenario, name, size, spec, check));
                Ok::<(), BenchError>(())
            };
        match scenario {
            Scenario::Cbr => negative("non-ibm-first-order", Variant::NonIbm, None, FAULT_NOT_IBM)?,
            Scenario::CbrSoapHeader => {
                negative(
                    "wrong-soap-header",
                    Variant::BadSoapHeader,
                    None,
                    FAULT_ROUTING,
                )?;
                negative(
                    "missing-soap-header",
                    Variant::NoSoapHeader,
                    None,
                    FAULT_ROUTING,
                )?;
            }
            Scenario::CbrTransportHeader => {
                let wrong = format!("routing: {}", crate::payload::BAD_ROUTING_VALUE);
                negative(
                    "wrong-http-header",
                    Variant::Plain,
                    Some(wrong),
                    FAULT_ROUTING,
                )?;
                negative(
                    "missing-http-header",
                    Variant::Plain,
                    Some("routing:".into()),
                    FAULT_ROUTING,
                )?;
            }
            _ => {}
        }
    }
    Ok(cases)
}

/// Runs `bench verify` and prints the table.
pub fn command(args: &VerifyArgs) -> Result<VerifyReport, BenchError> {
    let report = execute(args, |row| {
        eprintln!(
            "{} {} {} B c={}: {}",
            row.scenario,
            row.case,
            row.size,
            row.concurrency,
            if row.ok { "pass" } else { "FAIL" }
        )
    })?;
    print!("{}", report.table());
    if let Some(path) = &args.json {
        crate::write_json(path, &report)?;
    }
    Ok(report)
}

/// Runs every case; `progress` sees each row as it completes.
pub fn execute(
    args: &VerifyArgs,
    mut progress: impl FnMut(&CaseResult),
) -> Result<VerifyReport, BenchError> {
    let base = Url::parse(&args.base_url).map_err(BenchError::Usage)?;
    // Refused before any cell runs, not when its cell comes up.
    load::check_concurrency(args.concurrency.iter().copied().max().unwrap_or(1))?;
    let addr = load::resolve(&base)?;
    let sizes = args.sizes.clone().unwrap_or_else(|| DEFAULT_SIZES.to_vec());
    let mut scenarios = args
        .scenarios
        .clone()
        .unwrap_or_else(|| args.suite.scenarios().to_vec());
    args.suite.admit(&scenarios).map_err(BenchError::Usage)?;
    if let Some(xs) = &args.x {
        crate::bpel::keep_x(&mut scenarios, xs).map_err(BenchError::Usage)?;
    }
    let mut report = VerifyReport {
        base_url: args.base_url.clone(),
        cases: Vec::new(),
    };
    for &scenario in &scenarios {
        let cases = cases_for(scenario, &args.base_url, &sizes, args.keys.as_deref())?;
        for &c in &args.concurrency {
            for case in &cases {
                let Some((first, _)) = case.requests.first() else {
                    continue;
                };
                // Every request of a rotation at least once.
                let requests =
                    (if c == 1 { 3 } else { 2 * c as u64 }).max(case.requests.len() as u64);
                let feed = case
                    .db_write
                    .then(|| Arc::new(crate::db::WriteFeed::new(first.url.clone())));
                let sent = match &case.secure {
                    _ if feed.is_some() => Requests::DbWrite(
                        feed.clone()
                            .ok_or_else(|| BenchError::Failed("no database feed".into()))?,
                    ),
                    Some(client) => Requests::Secure(Arc::new(Feed::new(
                        SecureClient::clone_of(client),
                        first.clone(),
                        requests as usize,
                        false,
                    )?)),
                    None => {
                        Requests::from_specs(case.requests.clone()).map_err(BenchError::Failed)?
                    }
                };
                let plan = LoadPlan {
                    url: first.url.clone(),
                    addr,
                    requests: sent,
                    body_len: first.body.len(),
                    concurrency: c,
                    threads: 1,
                    stop: StopRule::Requests(requests),
                    warmup: Duration::ZERO,
                    rate: None,
                    keep_alive: true,
                    version: first.version,
                    timeout: args.timeout,
                };
                let r = load::execute(&plan)?;
                // db-write: every row written must read back as written.
                let read_back = feed
                    .as_ref()
                    .map(|f| f.read_back(addr, args.timeout))
                    .transpose();
                let row = CaseResult {
                    scenario: case.scenario.name().into(),
                    case: case.name.into(),
                    size: case.size,
                    concurrency: c,
                    requests,
                    passed: r.successes,
                    ok: r.successes == requests
                        && r.errors.total() == 0
                        && !r.interrupted
                        && read_back.is_ok(),
                    detail: r
                        .first_error
                        .clone()
                        .or_else(|| read_back.clone().err())
                        .or_else(|| r.interrupted.then(|| "interrupted".to_string())),
                };
                progress(&row);
                let interrupted = r.interrupted;
                report.cases.push(row);
                if interrupted {
                    return Ok(report);
                }
            }
        }
    }
    Ok(report)
}
