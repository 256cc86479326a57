//! Observability over real sockets: the access log (both formats, reopen for logrotate, a
//! writer that falls behind) and W3C trace context propagation to back ends.

use std::net::SocketAddr;
use std::time::Duration;

use busbar_engine::echo::EchoOptions;

use crate::support::*;

fn trace_yaml(back: SocketAddr) -> String {
    format!(
        "endpoints:\n  b: {{ url: \"http://{back}/t\", timeout: 5s }}\nproxies:\n  T:\n    path: /t\n    in:\n      - call: b\n"
    )
}

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn a_valid_traceparent_continues_to_the_back_end_under_a_new_parent() {
    let h = engine(&trace_yaml(header_back_end(&["traceparent", "tracestate"])));
    let mut c = Client::connect(h.http());
    let r = c
        .post(
            "/t",
            &[("traceparent", PARENT), ("tracestate", "vendor=abc")],
            b"x",
        )
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let (parent, state) = text.split_once('|').expect("two fields");
    let fields: Vec<&str> = parent.split('-').collect();
    assert_eq!(fields.len(), 4, "{parent}");
    assert_eq!(fields[0], "00");
    assert_eq!(fields[1], "4bf92f3577b34da6a3ce929d0e0e4736", "same trace");
    assert_ne!(
        fields[2], "00f067aa0ba902b7",
        "busbar's own span is the parent"
    );
    assert_eq!(fields[2].len(), 16);
    assert_eq!(fields[3], "01", "the sampled flag is kept");
    assert_eq!(state, "vendor=abc");
    // An unsampled caller stays unsampled.
    let r = c
        .post(
            "/t",
            &[(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            )],
            b"x",
        )
        .expect("answer");
    assert!(r.text().ends_with("-00|-"), "{}", r.text());
}

#[test]
fn a_missing_or_broken_traceparent_starts_a_new_trace_per_request() {
    let h = engine(&trace_yaml(header_back_end(&["traceparent", "tracestate"])));
    let mut c = Client::connect(h.http());
    let mut traces = std::collections::HashSet::new();
    for incoming in [
        None,
        None,
        Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"),
        Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        Some("garbage"),
    ] {
        let headers: Vec<(&str, &str)> = incoming.iter().map(|v| ("traceparent", *v)).collect();
        let r = c.post("/t", &headers, b"x").expect("answer");
        let text = r.text();
        let parent = text.split('|').next().unwrap_or("");
        let fields: Vec<&str> = parent.split('-').collect();
        assert_eq!(fields.len(), 4, "{incoming:?}: {parent}");
        assert_eq!(fields[1].len(), 32);
        assert!(fields[1]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(fields[1], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(fields[1], "0".repeat(32));
        assert!(traces.insert(fields[1].to_owned()), "a trace id repeated");
        // New traces are sampled at the default ratio of 1.
        assert_eq!(fields[3], "01");
    }
}

#[test]
fn sampling_zero_marks_new_traces_unsampled() {
    let yaml = format!(
        "tracing: {{ sample: 0 }}\n{}",
        trace_yaml(header_back_end(&["traceparent", "tracestate"]))
    );
    let h = engine(&yaml);
    let r = Client::connect(h.http())
        .post("/t", &[], b"x")
        .expect("answer");
    assert!(r.text().ends_with("-00|-"), "{}", r.text());
}

fn read_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let ok = eventually(Duration::from_secs(5), || {
        lines = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        lines.len() >= n
    });
    assert!(
        ok,
        "expected {n} lines in {}, got {lines:?}",
        path.display()
    );
    lines
}

#[test]
fn the_access_log_has_one_json_line_per_request_with_sizes_durations_and_trace() {
    let echo = echo(EchoOptions {
        delay: Some(Duration::from_millis(60)),
        ..Default::default()
    });
    let dir = temp_dir("access");
    let log = dir.join("access.log");
    let yaml = format!(
        "access_log: {{ path: \"{}\", format: json }}\nendpoints:\n  echo: {{ url: \"http://{}/e\", timeout: 5s }}\nproxies:\n  P:\n    path: /p\n    methods: [POST]\n    in:\n      - call: echo\n  R:\n    path: /r\n    in:\n      - respond: {{ status: 201, body: made }}\n",
        log.display(),
        echo.addr
    );
    let h = engine(&yaml);
    let mut c = Client::connect(h.http());
    let body = payload(70_000, 3);
    let r = c
        .post("/p?x=1", &[("traceparent", PARENT)], &body)
        .expect("answer");
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/r").expect("answer").status, 201);
    assert_eq!(c.get("/nothing/here").expect("answer").status, 404);
    assert_eq!(c.get("/p").expect("answer").status, 405);
    let lines = read_lines(&log, 4);
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let p = &parsed[0];
    assert_eq!(p["proxy"], "P");
    assert_eq!(p["method"], "POST");
    assert_eq!(p["target"], "/p?x=1");
    assert_eq!(p["status"], 200);
    assert_eq!(p["bytes_in"], 70_000);
    assert_eq!(p["bytes_out"], 70_000);
    assert_eq!(p["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(p["complete"], true);
    assert!(p["client"]
        .as_str()
        .is_some_and(|c| c.starts_with("127.0.0.1:")));
    let backend = p["backend_ms"].as_f64().expect("backend_ms");
    let total = p["duration_ms"].as_f64().expect("duration_ms");
    assert!(backend >= 60.0, "the echo waits 60 ms: {backend}");
    assert!(total >= backend, "{total} < {backend}");
    assert!(p["time"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z') && t.len() == 24));
    assert_eq!(parsed[1]["proxy"], "R");
    assert_eq!(parsed[1]["status"], 201);
    assert_eq!(parsed[1]["bytes_out"], 4);
    assert_eq!(parsed[1]["backend_ms"], 0.0);
    assert_eq!(parsed[2]["proxy"], "-");
    assert_eq!(parsed[2]["status"], 404);
    assert_eq!(parsed[3]["proxy"], "P");
    assert_eq!(parsed[3]["status"], 405);
    let written = metric(
        h.admin(),
        "busbar_access_log_lines_total{outcome=\"written\"}",
    );
    assert_eq!(written, Some(4.0));
}

#[test]
fn the_access_log_reopens_after_logrotate_and_writes_common_format() {
    let dir = temp_dir("rotate");
    let log = dir.join("access.log");
    let yaml = format!(
        "access_log: {{ path: \"{}\", format: common }}\nproxies:\n  R:\n    path: /r\n    in:\n      - respond: {{ status: 200, body: hello }}\n",
        log.display()
    );
    let h = engine(&yaml);
    let mut c = Client::connect(h.http());
    assert_eq!(c.get("/r?a=b").expect("answer").status, 200);
    let first = read_lines(&log, 1);
    let line = &first[0];
    assert!(line.starts_with("127.0.0.1 - - ["), "{line}");
    assert!(
        line.contains("] \"GET /r?a=b HTTP/1.1\" 200 5 R "),
        "{line}"
    );
    // logrotate: move the file away, then ask for a reopen.
    let rotated = dir.join("access.log.1");
    std::fs::rename(&log, &rotated).expect("rename");
    assert_eq!(c.get("/r").expect("answer").status, 200);
    assert_eq!(
        read_lines(&rotated, 2).len(),
        2,
        "written to the moved file until reopened"
    );
    h.engine().control().reopen_logs();
    // The reopen happens before the next line is written.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.get("/r").expect("answer").status, 200);
    assert_eq!(read_lines(&log, 1).len(), 1);
    assert_eq!(read_lines(&rotated, 2).len(), 2);
}

/// A log that cannot be written as fast as requests come (a pipe nobody reads) never holds
/// requests back: lines beyond the buffer are dropped and counted.
#[test]
fn a_stalled_access_log_drops_lines_instead_of_slowing_requests() {
    let dir = temp_dir("stall");
    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    // A reader that opens the pipe and never reads: writes block once its buffer is full.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open fifo");
    let yaml = format!(
        "access_log: {{ path: \"{}\", format: json, buffer: 16 }}\nproxies:\n  R:\n    path: /r\n    in:\n      - respond: {{ status: 200, body: \"{}\" }}\n",
        fifo.display(),
        "x".repeat(10)
    );
    let h = engine(&yaml);
    let mut c = Client::connect(h.http());
    let started = std::time::Instant::now();
    // ~300 bytes a line: 2,000 lines are far beyond a 64 KiB pipe and 16 queued lines.
    for _ in 0..2000 {
        assert_eq!(
            c.get(&format!("/r?{}", "p".repeat(100)))
                .expect("answer")
                .status,
            200
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "requests were held back by the log"
    );
    let dropped = metric(
        h.admin(),
        "busbar_access_log_lines_total{outcome=\"dropped\"}",
    );
    assert!(dropped.is_some_and(|d| d > 1000.0), "dropped: {dropped:?}");
    drop(reader);
}

#[test]
fn propagation_off_forwards_the_clients_trace_headers_untouched() {
    let yaml = format!(
        "tracing: {{ propagate: false }}\n{}",
        trace_yaml(header_back_end(&["traceparent", "tracestate"]))
    );
    let h = engine(&yaml);
    let mut c = Client::connect(h.http());
    let r = c
        .post(
            "/t",
            &[("traceparent", PARENT), ("tracestate", "v=1")],
            b"x",
        )
        .expect("answer");
    assert_eq!(r.text(), format!("{PARENT}|v=1"));
    let r = c.post("/t", &[], b"x").expect("answer");
    assert_eq!(r.text(), "-|-");
}
