//! Apache ODE's WS-BPEL unit suite, read in place from `../shared/conformance/ode-bpel-2.0/`
//! (the project does not copy it). Without the folder the test says so and passes nothing.

use std::path::PathBuf;

fn suite() -> Option<PathBuf> {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/ode-bpel-2.0");
    dir.is_dir().then_some(dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ode_suite_in_scope_tests_pass() {
    let Some(dir) = suite() else {
        eprintln!("skipped: ../shared/conformance/ode-bpel-2.0 is missing");
        return;
    };
    let ((passed, failed, skipped), results) =
        busbar_flow::harness::run_all(&[dir], |l| println!("{l}")).await;
    let in_scope = passed + failed;
    assert!(skipped <= busbar_flow::harness::OUT_OF_SCOPE.len());
    let failures: Vec<_> = results
        .iter()
        .filter(|r| matches!(r.verdict, busbar_flow::harness::Verdict::Failed(_)))
        .map(|r| r.name.clone())
        .collect();
    assert!(
        passed * 10 >= in_scope * 9,
        "{passed} of {in_scope} in-scope tests pass (< 90 %); failing: {failures:?}"
    );
}

#[test]
fn docs_list_every_skipped_folder_with_its_reason() {
    let doc = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/bpel.md"),
    )
    .expect("docs/bpel.md");
    for (name, why) in busbar_flow::harness::OUT_OF_SCOPE {
        let row = format!("| {name} | skipped | {why} |");
        assert!(doc.contains(&row), "docs/bpel.md lacks the row: {row}");
    }
}
