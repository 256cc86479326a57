//! The BPEL suite over sockets: a correct implementation of the SimpleInvoke processes and
//! HelloWorld passes `verify` and `load`; answers without ` and BPEL`, faults and truncated
//! answers are each caught.

mod support;

use std::time::Duration;

use busbar_bench::verify::{self, VerifyArgs, VerifyReport};
use busbar_bench::{parse_args, BenchCommand, Scenario, Suite};
use support::{start_bpel, Bpel};

fn args(base: String, x: Option<Vec<u8>>) -> VerifyArgs {
    VerifyArgs {
        base_url: base,
        suite: Suite::Bpel,
        scenarios: None,
        x,
        concurrency: vec![1, 8],
        sizes: None,
        timeout: Duration::from_secs(20),
        json: None,
        keys: None,
    }
}

fn run(a: &VerifyArgs) -> VerifyReport {
    verify::execute(a, |_| {}).expect("verify runs")
}

#[test]
fn correct_answers_pass_every_process_and_the_baseline() {
    let server = start_bpel(Bpel::Reference);
    let report = run(&args(server.base(), None));
    assert!(report.all_passed(), "{}", report.table());
    let names: Vec<&str> = report.cases.iter().map(|c| c.scenario.as_str()).collect();
    assert_eq!(
        names,
        [
            "bpel-x0",
            "bpel-x0",
            "bpel-x1",
            "bpel-x1",
            "bpel-x2",
            "bpel-x2",
            "bpel-x3",
            "bpel-x3",
            "bpel-direct",
            "bpel-direct"
        ]
    );
    // Every name of the rotation at least once.
    assert!(report.cases.iter().all(|c| c.requests >= 40));
}

#[test]
fn x_picks_the_processes_and_keeps_the_baseline() {
    let server = start_bpel(Bpel::Reference);
    let report = run(&args(server.base(), Some(vec![1, 3])));
    let names: Vec<&str> = report.cases.iter().map(|c| c.scenario.as_str()).collect();
    assert_eq!(
        names,
        [
            "bpel-x1",
            "bpel-x1",
            "bpel-x3",
            "bpel-x3",
            "bpel-direct",
            "bpel-direct"
        ]
    );
}

#[test]
fn a_greeting_without_bpel_fails_every_calling_process_but_not_x0() {
    let server = start_bpel(Bpel::NoBpelSuffix);
    let report = run(&args(server.base(), None));
    for c in &report.cases {
        let calls = c.scenario != "bpel-x0" && c.scenario != "bpel-direct";
        assert_eq!(c.ok, !calls, "{}", report.table());
    }
    let detail = report.cases[2].detail.as_deref().unwrap_or("");
    assert!(
        detail.starts_with("the answer is 'Hello user-") && detail.ends_with("and BPEL'"),
        "{detail}"
    );
}

#[test]
fn a_fault_and_a_truncated_answer_fail() {
    let server = start_bpel(Bpel::FaultOnTwo);
    let report = run(&args(server.base(), Some(vec![2])));
    for c in &report.cases {
        let two = c.scenario == "bpel-x2";
        assert_eq!(c.ok, !two, "{}", report.table());
        if two {
            let detail = c.detail.as_deref().unwrap_or("");
            assert!(
                detail.starts_with("HTTP status 500") && detail.contains("selectionFailure"),
                "{detail}"
            );
        }
    }

    let server = start_bpel(Bpel::Truncate);
    let report = run(&args(server.base(), None));
    assert!(report.cases.iter().all(|c| !c.ok), "{}", report.table());
    assert!(
        report.cases[0]
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("truncated"),
        "{}",
        report.table()
    );
}

#[test]
fn load_verifies_the_process_the_url_names() {
    let server = start_bpel(Bpel::Reference);
    let url = server.url("SimpleInvoke1");
    let cmd = parse_args([
        "bench", "load", &url, "--suite", "bpel", "--verify", "bpel", "--x", "1", "-n", "300",
        "-c", "4",
    ])
    .expect("arguments");
    let BenchCommand::Load(a) = cmd else {
        panic!("not load")
    };
    let r = busbar_bench::load::command(&a).expect("load runs");
    assert_eq!(
        (r.successes, r.errors.total()),
        (300, 0),
        "{:?}",
        r.first_error
    );

    // The wrong x for the URL: SimpleInvoke1 answers the greeting, x = 0 expects the name.
    let cmd = parse_args([
        "bench", "load", &url, "--suite", "bpel", "--verify", "bpel", "--x", "0", "-n", "20",
    ])
    .expect("arguments");
    let BenchCommand::Load(a) = cmd else {
        panic!("not load")
    };
    let r = busbar_bench::load::command(&a).expect("load runs");
    assert_eq!(r.errors.verify, 20);

    for bad in [
        vec!["--verify", "bpel"],
        vec!["--verify", "bpel", "--x", "0..3"],
        vec![],
    ] {
        let mut argv = vec!["bench", "load", &url, "--suite", "bpel", "-n", "1"];
        argv.extend(bad.iter());
        let BenchCommand::Load(a) = parse_args(argv).expect("arguments") else {
            panic!("not load")
        };
        assert!(busbar_bench::load::command(&a).is_err(), "{bad:?}");
    }
    assert_eq!(
        Scenario::HelloWorldDirect.url(&server.base()),
        server.url("HelloWorld")
    );
}
