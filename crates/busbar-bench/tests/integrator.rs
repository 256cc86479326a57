//! The integrator suite: its expected answers against the independent Python reference, and
//! `verify`, `load` and `run --suite integrator` against a correct test server and faulty ones.

mod support;

use std::io::Write;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use busbar_bench::check::json_difference;
use busbar_bench::integrator;
use busbar_bench::json_payload::{json_payload, orders_of_size, JsonKind};
use busbar_bench::matrix::{read_dir, SUMMARY_HEADER};
use busbar_bench::verify::{self, VerifyArgs};
use busbar_bench::{Scenario, Suite};
use serde_json::Value;
use support::{start_integrator, temp_dir, Integrator};

fn reference(mode: &str, input: &[u8]) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/integrator/reference.py"
    );
    let mut child = Command::new("python3")
        .arg(script)
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (scripts/setup.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write");
    let out = child.wait_with_output().expect("reference");
    assert!(out.status.success(), "reference.py {mode} failed");
    serde_json::from_slice(&out.stdout).expect("reference JSON")
}

#[test]
fn computed_answers_match_the_python_reference_on_generated_documents() {
    for seed in 1..=24u64 {
        let size = [512, 1024, 5120, 16_385][seed as usize % 4];
        let order = json_payload(JsonKind::Order, size, 0, seed).expect("order document");
        let doc: Value = serde_json::from_slice(&order).expect("JSON");
        let ours = integrator::transform(&doc).expect("transform");
        let theirs = reference("transform", &order);
        assert_eq!(
            json_difference(&ours, &theirs, &mut "$".into()),
            None,
            "transform, seed {seed}: ours {ours}, reference {theirs}"
        );
        let orders = orders_of_size(size, seed).expect("order list");
        let doc: Value = serde_json::from_slice(&orders).expect("JSON");
        let ours = integrator::map(&doc).expect("map");
        let theirs = reference("map", &orders);
        assert_eq!(
            json_difference(&ours, &theirs, &mut "$".into()),
            None,
            "map, seed {seed}"
        );
    }
}

fn args(base: String, scenarios: &[Scenario], sizes: Vec<usize>, conc: Vec<usize>) -> VerifyArgs {
    VerifyArgs {
        base_url: base,
        suite: Suite::Integrator,
        scenarios: Some(scenarios.to_vec()),
        x: None,
        concurrency: conc,
        sizes: Some(sizes),
        timeout: Duration::from_secs(20),
        json: None,
        keys: None,
    }
}

#[test]
fn correct_integrator_answers_pass_every_scenario_size_and_concurrency() {
    let (server, counts) = start_integrator(Integrator::Reference);
    let report = verify::execute(
        &args(
            server.api(),
            &Scenario::INTEGRATOR,
            vec![512, 1024, 16_385, 102_400],
            vec![1, 8],
        ),
        |_| {},
    )
    .expect("verify runs");
    assert!(report.all_passed(), "{}", report.table());
    // 6 sized scenarios × 4 sizes, ScatterGather once, and the two routers' other branch at
    // two sizes; at each of 2 concurrency levels.
    assert_eq!(report.cases.len(), (6 * 4 + 1 + 2 * 2) * 2);
    let scatter: Vec<_> = report
        .cases
        .iter()
        .filter(|c| c.scenario == "scatter-gather")
        .collect();
    assert!(scatter.iter().all(|c| c.size == 0 && c.requests >= 40));
    assert!(report.cases.iter().any(|c| c.case == "other-tier"));
    assert!(report.cases.iter().any(|c| c.case == "goog-price-list"));
    assert!(counts.premium.load(Ordering::SeqCst) > 0);
}

#[test]
fn an_answer_from_the_wrong_back_end_is_caught() {
    let (server, _) = start_integrator(Integrator::CbrAlwaysStandard);
    let report = verify::execute(
        &args(server.api(), &[Scenario::JsonCbr], vec![1024], vec![1]),
        |_| {},
    )
    .expect("verify runs");
    let positive = &report.cases[0];
    assert_eq!(positive.case, "positive");
    assert!(!positive.ok, "{}", report.table());
    assert_eq!(
        positive.detail.as_deref(),
        Some("answered by the 'standard' back end, expected 'premium' (x-echo-name)")
    );
    // Standard documents, the other half of the mix, still pass.
    assert_eq!(positive.passed, 1);
    assert!(!report.all_passed());
}

/// An answer naming the right back end and then another in a second header is not taken on
/// its first name: which back end answered is unknown, and the case fails.
#[test]
fn an_answer_naming_two_back_ends_is_caught() {
    let (server, _) = start_integrator(Integrator::CbrTwoNames);
    let report = verify::execute(
        &args(server.api(), &[Scenario::JsonCbr], vec![1024], vec![1, 4]),
        |_| {},
    )
    .expect("verify runs");
    assert!(report.cases.iter().all(|c| !c.ok), "{}", report.table());
    assert_eq!(
        report.cases[0].detail.as_deref(),
        Some("2 x-echo-name headers ('premium', 'standard'): which back end answered is unknown")
    );
    assert!(
        report.cases.iter().all(|c| c.passed == 0),
        "{}",
        report.table()
    );
}

#[test]
fn a_wrong_aggregate_is_caught_with_where_it_differs() {
    let (server, _) = start_integrator(Integrator::AggregateOffByOne);
    let report = verify::execute(
        &args(
            server.api(),
            &[Scenario::ScatterGather, Scenario::JsonPassthrough],
            vec![1024],
            vec![2],
        ),
        |_| {},
    )
    .expect("verify runs");
    let scatter = &report.cases[0];
    assert!(!scatter.ok && scatter.passed == 0, "{}", report.table());
    assert!(
        scatter
            .detail
            .as_deref()
            .unwrap_or("")
            .starts_with("$.stock.inStock is "),
        "{}",
        report.table()
    );
    assert!(report.cases[1].ok, "{}", report.table());
}

#[test]
fn load_sends_the_tier_mix_half_and_half_and_verifies_each_answer() {
    let (server, counts) = start_integrator(Integrator::Reference);
    let url = format!("{}/route", server.api());
    let cmd = busbar_bench::parse_args([
        "bench",
        "load",
        &url,
        "--suite",
        "integrator",
        "--verify",
        "json-cbr",
        "--size",
        "2k",
        "-c",
        "3",
        "-n",
        "300",
    ])
    .expect("parses");
    let busbar_bench::BenchCommand::Load(load) = cmd else {
        panic!("not a load command")
    };
    let r = busbar_bench::load::command(&load).expect("runs");
    assert_eq!((r.successes, r.errors.total()), (300, 0), "{}", r.summary());
    assert_eq!(r.request_bytes, 2048);
    let (p, s) = (
        counts.premium.load(Ordering::SeqCst),
        counts.standard.load(Ordering::SeqCst),
    );
    // Each client alternates; the run stops at 300 wherever each client is.
    assert!(
        p + s == 300 && p.abs_diff(s) <= 3,
        "{p} premium, {s} standard"
    );

    // ScatterGather: GETs of varying ids.
    let cmd = busbar_bench::parse_args([
        "bench",
        "load",
        &format!("{}/product", server.api()),
        "--suite",
        "integrator",
        "--verify",
        "scatter-gather",
        "-c",
        "2",
        "-n",
        "50",
    ])
    .expect("parses");
    let busbar_bench::BenchCommand::Load(load) = cmd else {
        panic!("not a load command")
    };
    let r = busbar_bench::load::command(&load).expect("runs");
    assert_eq!((r.successes, r.errors.total()), (50, 0), "{}", r.summary());
    assert_eq!(r.request_bytes, 0);
}

#[test]
fn integrator_matrix_writes_sized_cells_and_one_per_concurrency_for_scatter_gather() {
    let (server, _) = start_integrator(Integrator::Reference);
    let out = temp_dir("integrator-run");
    let cmd = busbar_bench::parse_args([
        "bench",
        "run",
        "--suite",
        "integrator",
        "--base",
        &server.api(),
        "--name",
        "reference",
        "--iterations",
        "1",
        "--duration",
        "200ms",
        "--warmup",
        "50ms",
        "--sizes",
        "1k,5k",
        "--concurrency",
        "2",
        "--scenarios",
        "json-cbr,json-transform,scatter-gather",
        "--out",
        out.to_str().expect("utf-8"),
    ])
    .expect("parses");
    assert_eq!(busbar_bench::run(cmd), ExitCode::SUCCESS);
    let (info, cells) = read_dir(&out).expect("reads back");
    assert_eq!(info.suite, "integrator");
    assert_eq!(cells.len(), 2 + 2 + 1);
    for c in &cells {
        assert!(c.result.successes > 0, "{}", c.result.summary());
        assert_eq!(c.result.errors.total(), 0, "{}", c.result.summary());
        assert!(c.result.latency_ms.p95 >= c.result.latency_ms.p90);
    }
    assert!(out.join("cells/scatter-gather-0-c2-i1.json").exists());
    assert!(out.join("cells/json-transform-5120-c2-i1.json").exists());
    let csv = std::fs::read_to_string(out.join("summary.csv")).expect("summary");
    assert!(SUMMARY_HEADER.contains("p90_ms,p95_ms,p99_ms"));
    assert_eq!(csv.lines().count(), 1 + 5);
    // In the report, ScatterGather's size chart has its one size, not the others'.
    let html = busbar_bench::report::render("integrator", &[(info, cells)]);
    let at = html
        .find("aria-label=\"scatter-gather: TPS by size at concurrency 2\"")
        .expect("scatter-gather chart");
    let svg = &html[at..at + html[at..].find("</svg>").expect("end of chart")];
    assert!(
        svg.contains(">no body<") && !svg.contains(">1 KiB<"),
        "{svg}"
    );
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn scenarios_outside_the_suite_and_integrator_loads_without_a_scenario_are_usage_errors() {
    let (server, _) = start_integrator(Integrator::Reference);
    let mut mixed = args(server.api(), &[Scenario::Direct], vec![1024], vec![1]);
    mixed.suite = Suite::Integrator;
    let err = verify::execute(&mixed, |_| {}).expect_err("classic in integrator");
    assert!(err.to_string().contains("--suite classic"), "{err}");
    assert_eq!(err.exit_code(), ExitCode::from(2));
    for argv in [
        vec!["bench", "load", "URL", "--verify", "json-cbr", "-n", "1"],
        vec!["bench", "load", "URL", "--suite", "integrator", "-n", "1"],
        vec![
            "bench",
            "load",
            "URL",
            "--suite",
            "integrator",
            "--verify",
            "xslt",
            "-n",
            "1",
        ],
    ] {
        let url = format!("{}/route", server.api());
        let argv: Vec<&str> = argv
            .into_iter()
            .map(|a| if a == "URL" { url.as_str() } else { a })
            .collect();
        let cmd = busbar_bench::parse_args(argv.clone()).expect("parses");
        assert_eq!(busbar_bench::run(cmd), ExitCode::from(2), "{argv:?}");
    }
    let usage = busbar_bench::parse_args(["bench", "verify", "http://x/api", "--suite", "esb"])
        .expect_err("unknown suite");
    assert!(usage.to_string().contains("unknown suite 'esb'"), "{usage}");
}

/// `run` refuses db-write before measuring anything, not when its cell comes up.
#[test]
fn run_refuses_db_write_before_any_cell() {
    let out = temp_dir("integrator-run-db-write");
    let cmd = busbar_bench::parse_args([
        "bench",
        "run",
        "--suite",
        "integrator",
        "--base",
        "http://127.0.0.1:9/api",
        "--name",
        "x",
        "--duration",
        "10s",
        "--concurrency",
        "2",
        "--scenarios",
        "db-read,db-write",
        "--out",
        out.to_str().expect("utf-8"),
    ])
    .expect("parses");
    let started = std::time::Instant::now();
    assert_ne!(busbar_bench::run(cmd), ExitCode::SUCCESS);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(
        !out.join("cells").exists(),
        "cells written before the refusal"
    );
}
