//! `busbar bench round` as a user runs it: a round file, real processes started and stopped by
//! the kit (a busbar engine, a deliberately faulty proxy, a target that never gets ready), the
//! result folder and its report opened in headless Chromium.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{eventually, temp_dir, test_keys};

/// The environment variable that turns this test binary into the faulty proxy.
const FAULTY_LISTEN: &str = "BUSBAR_TEST_FAULTY_PROXY";

/// Not a test: the faulty proxy the round starts as a target (this test binary run again with
/// only this function selected). It serves DirectProxy at `/elsewhere/Direct` only (so the
/// round must use the target's `paths`) and answers a POST there with the request body, except
/// that one answer in three to a body over 16 KiB is cut to its first 16 KiB, the corruption
/// the classic rounds found.
#[test]
#[ignore = "a server process for the round tests, started by them"]
fn faulty_proxy_server() {
    let Ok(addr) = std::env::var(FAULTY_LISTEN) else {
        return;
    };
    let listener = TcpListener::bind(&addr).expect("bind the faulty proxy");
    static SENT: AtomicU64 = AtomicU64::new(0);
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        std::thread::spawn(move || {
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let mut conn = conn;
            loop {
                let mut head = Vec::new();
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    match reader.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if let Some(v) = line
                        .to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                    {
                        length = v.parse().unwrap_or(0);
                    }
                    let end = line == "\r\n";
                    head.push(line);
                    if end {
                        break;
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let post = head
                    .first()
                    .is_some_and(|l| l.starts_with("POST /elsewhere/Direct "));
                let (status, mut answer) = if post {
                    ("200 OK", body)
                } else {
                    ("404 Not Found", b"no such page".to_vec())
                };
                if answer.len() > 16 * 1024
                    && SENT.fetch_add(1, Ordering::Relaxed).is_multiple_of(3)
                {
                    answer.truncate(16 * 1024);
                }
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: text/xml; charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
                    answer.len()
                );
                if conn.write_all(reply.as_bytes()).is_err() || conn.write_all(&answer).is_err() {
                    return;
                }
            }
        });
    }
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Ports {
    echo: SocketAddr,
    busbar: SocketAddr,
    admin: SocketAddr,
    faulty: SocketAddr,
    never: SocketAddr,
}

/// `busbar bench round FILE --out OUT` to its end: how it exited, and what it said.
fn run_round(file: &Path, out: &Path) -> (std::process::Output, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .args(["bench", "round"])
        .arg(file)
        .arg("--out")
        .arg(out)
        .output()
        .expect("busbar bench round");
    let log = String::from_utf8_lossy(&run.stderr).into_owned();
    (run, log)
}

/// A round over busbar (DirectProxy, CBRProxy and SecureProxy with fresh messages, with the
/// test run's keys), the faulty proxy (DirectProxy) and a target that never answers.
fn round_file(dir: &Path, p: &Ports, rounds: usize, duration: &str, verify: bool) -> PathBuf {
    let me = std::env::current_exe().expect("test binary");
    let text = format!(
        r#"title: "round test"
rounds: {rounds}
duration: {duration}
warmup: 200ms
verify: {verify}
backend:
  command: [busbar, echo, --listen, "{echo}", --workers, "1"]
  ready: "{echo}"
suites:
  classic:
    scenarios: [direct, cbr, secure]
    sizes: [1k, 20k]
    concurrency: [4]
    keys: "{keys}"
    pool: 20
targets:
  - name: busbar
    version: test
    command: [busbar, run, examples/esb-benchmark.yaml]
    dir: "{repo}"
    env:
      BUSBAR_WORKERS: "1"
      BUSBAR_LOG: warn
      BUSBAR_ECHO_EMBEDDED: "false"
      BUSBAR_ECHO: "{echo}"
      BUSBAR_LISTEN: "{busbar}"
      BUSBAR_ADMIN: "{admin}"
      BUSBAR_KEYS: "{keys}"
    suites:
      classic: {{ base: "http://{busbar}/service" }}
  - name: faulty
    command: ["{me}", "bench_round::faulty_proxy_server", --exact, --ignored, --nocapture]
    env: {{ {FAULTY_LISTEN}: "{faulty}" }}
    suites:
      classic:
        base: "http://{faulty}/service"
        scenarios: [direct]
        paths: {{ direct: /elsewhere/Direct }}
  - name: never-ready
    command: [sleep, "60"]
    ready_timeout: 1s
    stop_timeout: 2s
    suites:
      classic: {{ base: "http://{never}/service" }}
"#,
        echo = p.echo,
        busbar = p.busbar,
        admin = p.admin,
        faulty = p.faulty,
        never = p.never,
        repo = repo().display(),
        keys = test_keys().display(),
        me = me.display(),
    );
    let file = dir.join("round.yaml");
    std::fs::write(&file, text).expect("write the round file");
    file
}

fn ports() -> Ports {
    Ports {
        echo: free_port(),
        busbar: free_port(),
        admin: free_port(),
        faulty: free_port(),
        never: free_port(),
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Opens the report in headless Chromium and returns the DOM it built.
fn rendered(html: &Path) -> String {
    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.exists(),
        "/usr/bin/chromium is missing: install Debian's `chromium` package (scripts/setup.sh) to open the report"
    );
    let profile = temp_dir("round-chromium");
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn answers(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok()
}

#[test]
fn a_round_flags_the_faulty_proxys_corruption_and_goes_on_past_a_target_that_never_starts() {
    let dir = temp_dir("round");
    let p = ports();
    // Answers not verified: the corruption must show in the answer sizes alone.
    let file = round_file(&dir, &p, 2, "400ms", false);
    let out = dir.join("out");
    let (run, log) = run_round(&file, &out);
    // A target that did not start makes the exit status 1, after the whole round ran.
    assert_eq!(run.status.code(), Some(1), "{log}");
    assert!(log.contains("never-ready did not start"), "{log}");
    assert!(
        log.contains("[22/28] round 2 faulty direct 20480 B c=4"),
        "{log}"
    );

    let info = read_json(&out.join("round.json"));
    assert_eq!(info["schema"], "busbar-bench/round/v1");
    assert_eq!(info["interrupted"], false);
    assert_eq!(info["rounds_begun"], 2);
    assert_eq!(info["cells_planned"], 28);
    assert_eq!(info["cells_measured"], 16);
    assert!(info["finished_unix"].as_u64().unwrap_or(0) > 0);
    let targets = info["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 3);
    for t in &targets[..2] {
        let starts = t["starts"].as_array().expect("starts");
        assert_eq!(starts.len(), 2, "{t}");
        for s in starts {
            assert!(s["startup_ms"].as_f64().is_some(), "{s}");
            assert!(s["peak_rss_kib"].as_u64().unwrap_or(0) > 1000, "{s}");
            assert!(s["error"].is_null(), "{s}");
            // Stopped by the kit at the end of its turn.
            assert!(s["exit"].as_str().is_some(), "{s}");
            // Settled after its cells (quickly: nothing was left waiting).
            let settle = s["settle_s"].as_f64().unwrap_or(-1.0);
            assert!((0.0..10.0).contains(&settle), "{s}");
        }
    }
    for s in targets[2]["starts"].as_array().expect("starts") {
        assert!(s["startup_ms"].is_null(), "{s}");
        let why = s["error"].as_str().unwrap_or_default();
        assert!(why.contains("not ready after 1 s"), "{why}");
    }
    assert!(!answers(p.busbar) && !answers(p.faulty) && !answers(p.echo));

    // Every cell on disk, in `bench run`'s layout (so `bench report` reads it too).
    let busbar = read_json(&out.join("targets/busbar/classic/run.json"));
    assert_eq!(busbar["cells"].as_array().map(Vec::len), Some(12));
    assert_eq!(busbar["iterations"], 2);
    for rel in busbar["cells"].as_array().expect("cells") {
        let cell = read_json(
            &out.join("targets/busbar/classic")
                .join(rel.as_str().unwrap_or("")),
        );
        assert!(
            cell["result"]["successes"].as_u64().unwrap_or(0) > 0,
            "{cell}"
        );
        assert_eq!(cell["result"]["errors"]["verify"], 0);
    }
    // The classic 8-column CSV per ESB and round.
    for name in [
        "busbar-classic-round1",
        "busbar-classic-round2",
        "faulty-classic-round1",
    ] {
        let csv = std::fs::read_to_string(out.join(format!("csv/{name}.csv"))).expect("csv");
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("service,size,concurrency,completed,failed,writeErrors,TPS,timePerRequest_ms")
        );
        let rows: Vec<&str> = lines.collect();
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| r.split(',').count() == 8), "{csv}");
    }

    // The faulty proxy's 20 KiB answers came in two sizes: flagged; busbar's were steady.
    let summary = read_json(&out.join("summary.json"));
    let sizes = summary["sizes"].as_array().expect("sizes");
    let find = |target: &str, scenario: &str, size: u64| {
        sizes
            .iter()
            .find(|s| s["target"] == target && s["scenario"] == scenario && s["size"] == size)
            .unwrap_or_else(|| panic!("no size check for {target} {scenario} {size}"))
    };
    let flags = find("faulty", "direct", 20480)["flags"].to_string();
    assert!(flags.contains("possible corruption"), "{flags}");
    assert!(
        flags.contains("16384 B") && flags.contains("20480 B"),
        "{flags}"
    );
    assert_eq!(
        find("faulty", "direct", 1024)["flags"],
        serde_json::json!([])
    );
    for (scenario, size) in [("direct", 1024), ("direct", 20480), ("cbr", 20480)] {
        let check = find("busbar", scenario, size);
        assert_eq!(check["flags"], serde_json::json!([]), "{check}");
        assert_eq!(check["range"], serde_json::json!([size, size]));
    }
    let errors = summary["errors"].as_array().expect("errors");
    let never = errors
        .iter()
        .find(|e| e["target"] == "never-ready")
        .expect("never-ready");
    assert_eq!(never["failed_starts"], 2);

    // The report can be rendered again from the folder.
    let again = dir.join("again.html");
    let (status, text) = crate::support::bench(&[
        "report",
        out.to_str().unwrap_or(""),
        "--out",
        again.to_str().unwrap_or(""),
    ]);
    assert!(status.success(), "{text}");
    let html = std::fs::read_to_string(&again).expect("report written again");
    assert!(html.contains("possible corruption") && html.contains("unanswered at a cell"));

    let dom = rendered(&out.join("report.html"));
    for needle in [
        "round test",
        "Average throughput per ESB",
        "Scenario × ESB",
        "Errors over all requests",
        "Answer sizes across rounds",
        "possible corruption",
        "Start-up and memory",
        "not ready after 1 s",
        "Commands",
        "faulty_proxy_server",
        "Scenario: direct",
    ] {
        assert!(dom.contains(needle), "the rendered report lacks {needle:?}");
    }
}

#[test]
fn a_round_whose_answers_fail_their_check_exits_1_naming_the_cells() {
    let dir = temp_dir("round-failed-check");
    let faulty = free_port();
    let me = std::env::current_exe().expect("test binary");
    let file = dir.join("round.yaml");
    let text = format!(
        r#"title: "failed checks"
rounds: 1
duration: 300ms
warmup: 0s
verify: true
suites:
  classic:
    scenarios: [direct]
    sizes: [1k, 20k]
    concurrency: [2]
targets:
  - name: faulty
    command: ["{me}", "bench_round::faulty_proxy_server", --exact, --ignored, --nocapture]
    env: {{ {FAULTY_LISTEN}: "{faulty}" }}
    suites:
      classic:
        base: "http://{faulty}/service"
        paths: {{ direct: /elsewhere/Direct }}
"#,
        me = me.display(),
    );
    std::fs::write(&file, text).expect("write the round file");
    let out = dir.join("out");
    let (run, log) = run_round(&file, &out);
    // Every target started: the cut 20 KiB answers alone make the exit status 1.
    assert_eq!(run.status.code(), Some(1), "{log}");
    assert!(
        log.contains("1 cell(s) had answers that failed their check")
            && log.contains("faulty direct 20480 B c=2 round 1:"),
        "{log}"
    );
    assert!(!log.contains("faulty direct 1024 B c=2 round 1:"), "{log}");
    let run = read_json(&out.join("targets/faulty/classic/run.json"));
    let failed = run["failed_cells"].as_array().expect("failed_cells");
    assert_eq!(failed.len(), 1, "{run}");
    assert!(
        failed[0]
            .as_str()
            .is_some_and(|f| f.contains("20480 B") && f.contains("verify error")),
        "{run}"
    );
    assert!(!answers(faulty));
}

#[test]
fn ctrl_c_mid_round_stops_the_target_and_leaves_a_valid_partial_report() {
    let dir = temp_dir("round-interrupt");
    let p = ports();
    let file = round_file(&dir, &p, 3, "1s", true);
    let out = dir.join("out");
    let mut kit = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .args(["bench", "round"])
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("kit.log")).expect("log"))
        .spawn()
        .expect("busbar bench round");
    // Once the first cell is written, Ctrl-C in the middle of the second.
    let cells = out.join("targets/busbar/classic/cells");
    let started = eventually(Duration::from_secs(60), || {
        std::fs::read_dir(&cells).is_ok_and(|d| d.count() >= 1)
    });
    assert!(
        started,
        "no cell measured: {}",
        std::fs::read_to_string(dir.join("kit.log")).unwrap_or_default()
    );
    std::thread::sleep(Duration::from_millis(300));
    let sent = Command::new("kill")
        .args(["-INT", &kit.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = kit.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the kit did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(dir.join("kit.log")).unwrap_or_default();
    assert_eq!(status.code(), Some(130), "{log}");
    // The target and the back end were stopped, not left behind.
    assert!(!answers(p.busbar) && !answers(p.echo), "{log}");

    let info = read_json(&out.join("round.json"));
    assert_eq!(info["interrupted"], true);
    assert!(info["finished_unix"].as_u64().unwrap_or(0) > 0);
    let measured = info["cells_measured"].as_u64().unwrap_or(0);
    assert!(
        (1..info["cells_planned"].as_u64().unwrap_or(0)).contains(&measured),
        "{info}"
    );
    let run = read_json(&out.join("targets/busbar/classic/run.json"));
    assert_eq!(run["interrupted"], true);
    for rel in run["cells"].as_array().expect("cells") {
        let cell = read_json(
            &out.join("targets/busbar/classic")
                .join(rel.as_str().unwrap_or("")),
        );
        assert!(
            cell["result"]["successes"].as_u64().unwrap_or(0) > 0,
            "{cell}"
        );
    }
    let start = &info["targets"][0]["starts"][0];
    assert!(start["exit"].as_str().is_some(), "{start}");
    let dom = rendered(&out.join("report.html"));
    assert!(
        dom.contains("interrupted"),
        "the report does not say it was interrupted"
    );
    assert!(dom.contains("Answer sizes across rounds"));
}

#[test]
fn a_bad_round_file_is_refused_with_its_file_line_and_key() {
    let dir = temp_dir("round-bad");
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        "title: bad\nduraton: 3s\nsuites: { classic: { concurrency: [1] } }\ntargets: []\n",
    )
    .expect("write");
    let (status, text) =
        crate::support::bench(&["round", file.to_str().unwrap_or(""), "--out", "x"]);
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(
        text.contains("bad.yaml") && text.contains("line 2") && text.contains("duraton"),
        "{text}"
    );

    std::fs::write(
        &file,
        "title: bad\nsuites:\n  classic: { concurrency: [1], scenarios: [direct, json-map] }\ntargets:\n  - name: x\n    command: [true]\n    suites:\n      integrator: { base: \"http://127.0.0.1:1/api\" }\n",
    )
    .expect("write");
    let (status, text) =
        crate::support::bench(&["round", file.to_str().unwrap_or(""), "--out", "x"]);
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(
        text.contains("suites.classic.scenarios") && text.contains("json-map"),
        "{text}"
    );
    assert!(
        text.contains(
            "bad.yaml:5: target 'x': suites.integrator: the round measures no such suite"
        ),
        "{text}"
    );
}
