//! The matrix (`run`) against two test servers, then the HTML report rendered by a real
//! browser.

mod support;

use std::path::Path;
use std::process::Command;

use busbar_bench::matrix::{read_dir, SUMMARY_HEADER};
use support::{start, temp_dir, Behaviour};

fn run_matrix(base: &str, name: &str, out: &Path) -> std::process::ExitCode {
    let cmd = busbar_bench::parse_args([
        "bench",
        "run",
        "--suite",
        "classic",
        "--base",
        base,
        "--name",
        name,
        "--target-version",
        "test-1.0",
        "--iterations",
        "2",
        "--duration",
        "300ms",
        "--warmup",
        "100ms",
        "--sizes",
        "512,1024",
        "--concurrency",
        "1,4",
        "--scenarios",
        "direct,xslt",
        "--out",
        out.to_str().expect("utf-8"),
    ])
    .expect("parses");
    busbar_bench::run(cmd)
}

#[test]
fn a_matrix_with_answers_that_fail_their_check_exits_1_and_names_those_cells() {
    let swapped = start(Behaviour::XsltSwap);
    let root = temp_dir("report-failed");
    let out = root.join("esb");
    assert_eq!(
        run_matrix(&swapped.base(), "ESB-X", &out),
        std::process::ExitCode::from(1)
    );
    // Everything measured is still written: only the xslt cells failed.
    let (info, cells) = read_dir(&out).expect("reads back");
    assert_eq!(cells.len(), 16);
    assert_eq!(info.failed_cells.len(), 8, "{:?}", info.failed_cells);
    assert!(
        info.failed_cells
            .iter()
            .all(|f| f.starts_with("xslt ") && f.contains("verify error")),
        "{:?}",
        info.failed_cells
    );
    let csv = std::fs::read_to_string(out.join("summary.csv")).expect("summary");
    assert!(SUMMARY_HEADER.ends_with(",unanswered"));
    for row in csv.lines().skip(1) {
        let cols: Vec<&str> = row.split(',').collect();
        assert_eq!(cols.len(), SUMMARY_HEADER.split(',').count(), "{row}");
        assert_eq!(cols.last(), Some(&"0"), "{row}");
        let verify_failures: u64 = cols[7].parse().expect("a count");
        assert_eq!(verify_failures > 0, cols[0] == "xslt", "{row}");
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn matrix_writes_cells_summary_and_index_and_report_renders_in_chromium() {
    let fast = start(Behaviour::Reference);
    let slow = start(Behaviour::Delay(std::time::Duration::from_millis(2)));
    let root = temp_dir("report");
    let (a, b) = (root.join("esb-a"), root.join("esb-b"));
    assert_eq!(
        run_matrix(&fast.base(), "ESB-A", &a),
        std::process::ExitCode::SUCCESS
    );
    assert_eq!(
        run_matrix(&slow.base(), "ESB-B", &b),
        std::process::ExitCode::SUCCESS
    );

    let (info, cells) = read_dir(&a).expect("reads back");
    assert_eq!(info.target.name, "ESB-A");
    assert_eq!(info.target.version.as_deref(), Some("test-1.0"));
    assert!(info.machine.cores >= 1 && !info.machine.kernel.is_empty());
    assert_eq!(cells.len(), 2 * 2 * 2 * 2);
    for c in &cells {
        assert!(c.result.successes > 0, "{}", c.result.summary());
        assert_eq!(c.result.errors.total(), 0, "{}", c.result.summary());
    }
    assert!(a.join("cells/direct-512-c4-i2.json").exists());
    let csv = std::fs::read_to_string(a.join("summary.csv")).expect("summary");
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(SUMMARY_HEADER));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 16);
    let cols = SUMMARY_HEADER.split(',').count();
    assert!(rows.iter().all(|r| r.split(',').count() == cols));
    assert!(rows[0].starts_with("direct,512,1,1,"));

    let html_path = root.join("report.html");
    let cmd = busbar_bench::parse_args([
        "bench",
        "report",
        a.to_str().expect("utf-8"),
        b.to_str().expect("utf-8"),
        "--out",
        html_path.to_str().expect("utf-8"),
    ])
    .expect("parses");
    assert_eq!(busbar_bench::run(cmd), std::process::ExitCode::SUCCESS);
    let html = std::fs::read_to_string(&html_path).expect("report");
    for needle in [
        "ESB-A test-1.0",
        "ESB-B test-1.0",
        "<svg",
        "Scenario: direct",
        "Scenario: xslt",
        "TPS by size at concurrency 4",
        "TPS by concurrency at 1 KiB",
        "p95 ms",
        "p99.9 ms",
    ] {
        assert!(html.contains(needle), "report lacks {needle}");
    }
    // Self-contained: no scripts, no external assets, no links.
    for forbidden in ["<script", "src=", "href=", "<link", "@import"] {
        assert!(!html.contains(forbidden), "report contains {forbidden}");
    }

    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.exists(),
        "/usr/bin/chromium is missing: install Debian's `chromium` package (apt-get install -y chromium) to render the report"
    );
    let png = root.join("report.png");
    let profile = temp_dir("chromium-profile");
    let status = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1280,2000")
        .arg(format!("file://{}", html_path.display()))
        .output()
        .expect("chromium runs");
    assert!(
        status.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let bytes = std::fs::read(&png).expect("screenshot written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    // A blank 1280×2000 page compresses to a few KB; charts and tables make it much larger.
    assert!(
        bytes.len() > 40_000,
        "screenshot is only {} bytes",
        bytes.len()
    );
    if let Ok(keep) = std::env::var("BUSBAR_BENCH_KEEP_REPORT") {
        let _ = std::fs::copy(&png, keep);
    }
    let _ = std::fs::remove_dir_all(&profile);
    let _ = std::fs::remove_dir_all(&root);
}
