//! The corruption checker against a correct reference server and deliberately broken ones.

mod support;

use std::time::Duration;

use busbar_bench::check::Scenario;
use busbar_bench::verify::{self, VerifyArgs, VerifyReport};
use support::{start, Behaviour};

fn args(
    base: String,
    scenarios: &[Scenario],
    sizes: Option<Vec<usize>>,
    conc: Vec<usize>,
) -> VerifyArgs {
    VerifyArgs {
        base_url: base,
        suite: scenarios
            .first()
            .map_or(busbar_bench::Suite::Classic, |s| s.suite()),
        scenarios: Some(scenarios.to_vec()),
        x: None,
        concurrency: conc,
        sizes,
        timeout: Duration::from_secs(20),
        json: None,
        keys: None,
    }
}

fn run(a: &VerifyArgs) -> VerifyReport {
    verify::execute(a, |_| {}).expect("verify runs")
}

#[test]
fn reference_implementation_passes_every_scenario_size_and_concurrency() {
    let server = start(Behaviour::Reference);
    let report = run(&args(server.base(), &Scenario::ALL, None, vec![1, 50]));
    assert!(report.all_passed(), "{}", report.table());
    // 5 scenarios × 17 sizes × 2 levels, plus negatives: 1 (cbr) + 2 + 2, at 2 sizes, × 2 levels.
    assert_eq!(report.cases.len(), 5 * 17 * 2 + 5 * 2 * 2);
    assert!(report
        .cases
        .iter()
        .any(|c| c.size == 1_048_576 && c.concurrency == 50));
    assert!(report.cases.iter().any(|c| c.case == "missing-http-header"));
}

#[test]
fn byte_flipped_after_16k_is_caught_and_smaller_bodies_still_pass() {
    let server = start(Behaviour::FlipAfter16K);
    let report = run(&args(
        server.base(),
        &[Scenario::Direct],
        Some(vec![1024, 16_384, 16_385, 20_000]),
        vec![1, 4],
    ));
    assert!(!report.all_passed());
    for c in &report.cases {
        let corrupted = c.size > 16 * 1024 + 7;
        assert_eq!(c.ok, !corrupted, "{}", report.table());
        if corrupted {
            let detail = c.detail.as_deref().unwrap_or("");
            assert!(detail.contains("at byte 16391"), "{detail}");
            assert_eq!(c.passed, 0);
        }
    }
}

#[test]
fn truncated_answers_are_caught() {
    let server = start(Behaviour::Truncate);
    let report = run(&args(
        server.base(),
        &[Scenario::Direct, Scenario::Cbr],
        Some(vec![512, 8192]),
        vec![1],
    ));
    let positives: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.case == "positive")
        .collect();
    assert!(!positives.is_empty());
    assert!(positives.iter().all(|c| !c.ok), "{}", report.table());
    assert!(
        positives[0]
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("request was 512"),
        "{}",
        report.table()
    );
}

/// An XSLT answer or a fault whose beginning is right but whose end is missing (the envelope
/// left open) is caught: the checks read every answer to its end.
#[test]
fn truncated_xslt_answers_and_faults_are_caught() {
    let server = start(Behaviour::Truncate);
    let report = run(&args(
        server.base(),
        &[Scenario::Xslt, Scenario::Cbr],
        Some(vec![1024, 16_385]),
        vec![1, 4],
    ));
    let xslt: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.scenario == "xslt")
        .collect();
    assert!(!xslt.is_empty());
    assert!(xslt.iter().all(|c| !c.ok), "{}", report.table());
    assert!(
        xslt[0]
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("truncated"),
        "{}",
        report.table()
    );
    let faults: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.case == "non-ibm-first-order")
        .collect();
    assert!(!faults.is_empty(), "{}", report.table());
    assert!(faults.iter().all(|c| !c.ok), "{}", report.table());
}

#[test]
fn success_answer_to_a_non_ibm_order_is_caught() {
    let server = start(Behaviour::WrongBodyOnNegative);
    let report = run(&args(
        server.base(),
        &[Scenario::Cbr],
        Some(vec![1024]),
        vec![1],
    ));
    let negatives: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.case == "non-ibm-first-order")
        .collect();
    assert_eq!(negatives.len(), 2);
    assert!(negatives.iter().all(|c| !c.ok));
    assert!(negatives[0]
        .detail
        .as_deref()
        .unwrap_or("")
        .starts_with("HTTP status 200"));
    assert!(
        report
            .cases
            .iter()
            .filter(|c| c.case == "positive")
            .all(|c| c.ok),
        "{}",
        report.table()
    );
    assert!(!report.all_passed());
}

#[test]
fn xslt_answer_with_two_orders_swapped_is_caught() {
    let server = start(Behaviour::XsltSwap);
    let report = run(&args(
        server.base(),
        &[Scenario::Xslt],
        Some(vec![1024, 10_240]),
        vec![1, 8],
    ));
    assert!(report.cases.iter().all(|c| !c.ok), "{}", report.table());
    assert_eq!(
        report.cases[0].detail.as_deref(),
        Some("order 1 differs from the one sent")
    );
}

#[test]
fn reference_answers_sent_chunked_also_pass() {
    let server = start(Behaviour::Chunked);
    let report = run(&args(
        server.base(),
        &Scenario::ALL,
        Some(vec![512, 16_385]),
        vec![1, 3],
    ));
    assert!(report.all_passed(), "{}", report.table());
}

#[test]
fn verify_command_exit_codes_distinguish_failure_unreachable_and_usage() {
    let bad = start(Behaviour::Truncate);
    let cmd = busbar_bench::parse_args([
        "bench",
        "verify",
        &bad.base(),
        "--scenarios",
        "direct",
        "--sizes",
        "1024",
        "--concurrency",
        "1",
    ])
    .expect("parses");
    assert_eq!(busbar_bench::run(cmd), std::process::ExitCode::from(1));

    let good = start(Behaviour::Reference);
    let cmd = busbar_bench::parse_args([
        "bench",
        "verify",
        &good.base(),
        "--scenarios",
        "cbr-transport-header",
        "--sizes",
        "1024",
        "--concurrency",
        "2",
    ])
    .expect("parses");
    assert_eq!(busbar_bench::run(cmd), std::process::ExitCode::SUCCESS);

    // Nothing listens on a port we just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let url = format!("http://127.0.0.1:{port}/service");
    let err = verify::execute(
        &args(url.clone(), &[Scenario::Direct], None, vec![1]),
        |_| {},
    )
    .expect_err("unreachable");
    assert!(err.to_string().contains(&url), "{err}");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(1));

    let usage = busbar_bench::parse_args(["bench", "verify", &url, "--scenarios", "direct,bogus"])
        .expect_err("usage");
    assert_eq!(usage.exit_code(), 2);
    assert!(
        usage.to_string().contains("unknown scenario 'bogus'"),
        "{usage}"
    );
    // WS-Security scenarios need the client's keys: without them, a usage error.
    let server = start(Behaviour::Reference);
    let mut no_keys = args(
        server.base(),
        &[Scenario::Secure],
        Some(vec![1024]),
        vec![1],
    );
    no_keys.keys = None;
    let err = verify::execute(&no_keys, |_| {}).expect_err("no keys");
    assert!(err.to_string().contains("--keys"), "{err}");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2));
    let size =
        busbar_bench::parse_args(["bench", "verify", &url, "--sizes", "100"]).expect_err("usage");
    assert_eq!(size.exit_code(), 2);
}
