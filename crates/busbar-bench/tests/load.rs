//! The load generator over real sockets: keep-alive, HTTP/1.0, chunked, no keep-alive,
//! open loop, legacy TPS, CSV and JSON formats.

mod support;

use std::time::Duration;

use busbar_bench::load::{self, LoadArgs, LoadResult};
use busbar_bench::BenchCommand;
use support::{start, start_http10, Behaviour};

fn load_args(argv: &[&str]) -> LoadArgs {
    let mut full = vec!["bench", "load"];
    full.extend_from_slice(argv);
    match busbar_bench::parse_args(full).expect("parses") {
        BenchCommand::Load(a) => a,
        other => panic!("not a load command: {other:?}"),
    }
}

fn execute(argv: &[&str]) -> LoadResult {
    let plan = load::plan_from_args(&load_args(argv)).expect("plan");
    load::execute(&plan).expect("runs")
}

#[test]
fn closed_loop_count_mode_on_keep_alive_server_verifies_every_response() {
    let s = start(Behaviour::Reference);
    let r = execute(&[
        &s.url("DirectProxy"),
        "-c",
        "4",
        "-n",
        "400",
        "--size",
        "5120",
        "--verify",
        "direct",
    ]);
    assert_eq!(
        (r.requests, r.successes, r.errors.total()),
        (400, 400, 0),
        "{}",
        r.summary()
    );
    assert_eq!(r.response_bytes_mean, 5120.0);
    assert_eq!(r.mode, "closed");
    assert!(
        r.latency_ms.p50 > 0.0
            && r.latency_ms.p50 <= r.latency_ms.p90
            && r.latency_ms.p90 <= r.latency_ms.p95
            && r.latency_ms.p95 <= r.latency_ms.p99
            && r.latency_ms.p99 <= r.latency_ms.max
    );
    assert!(r.tps > 0.0);
}

#[test]
fn duration_mode_with_two_threads_stops_by_itself() {
    let s = start(Behaviour::Reference);
    let started = std::time::Instant::now();
    let r = execute(&[
        &s.url("CBRProxy"),
        "-c",
        "6",
        "--threads",
        "2",
        "-d",
        "500ms",
        "--warmup",
        "200ms",
        "--verify",
        "cbr",
    ]);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(r.elapsed_s >= 0.49 && r.elapsed_s < 1.5, "{}", r.elapsed_s);
    assert!(r.successes > 50, "{}", r.summary());
    assert_eq!(r.errors.total(), 0, "{}", r.summary());
}

#[test]
fn http10_close_delimited_server_is_measured() {
    let s = start_http10();
    let r = execute(&[
        &s.url("DirectProxy"),
        "--http1.0",
        "-c",
        "2",
        "-n",
        "40",
        "--size",
        "16385",
        "--verify",
        "direct",
    ]);
    assert_eq!((r.successes, r.errors.total()), (40, 0), "{}", r.summary());
    assert_eq!(r.http_version, "1.0");
}

#[test]
fn http10_keep_alive_against_hyper_reuses_connections() {
    let s = start(Behaviour::Reference);
    let r = execute(&[
        &s.url("DirectProxy"),
        "--http1.0",
        "-c",
        "2",
        "-n",
        "50",
        "--verify",
        "direct",
    ]);
    assert_eq!((r.successes, r.errors.total()), (50, 0), "{}", r.summary());
}

#[test]
fn chunked_responses_are_de_framed_and_verified() {
    let s = start(Behaviour::Chunked);
    for size in ["512", "70000"] {
        let r = execute(&[
            &s.url("DirectProxy"),
            "-c",
            "3",
            "-n",
            "60",
            "--size",
            size,
            "--verify",
            "direct",
        ]);
        assert_eq!((r.successes, r.errors.total()), (60, 0), "{}", r.summary());
    }
    let r = execute(&[
        &s.url("XSLTProxy"),
        "-c",
        "2",
        "-n",
        "20",
        "--verify",
        "xslt",
    ]);
    assert_eq!(r.successes, 20, "{}", r.summary());
}

#[test]
fn no_keepalive_opens_a_connection_per_request() {
    let s = start(Behaviour::Reference);
    let r = execute(&[
        &s.url("DirectProxy"),
        "--no-keepalive",
        "-c",
        "2",
        "-n",
        "30",
        "--verify",
        "direct",
    ]);
    assert_eq!((r.successes, r.errors.total()), (30, 0), "{}", r.summary());
    assert!(!r.keep_alive);
}

#[test]
fn verification_failures_and_status_errors_are_counted_apart() {
    let s = start(Behaviour::FlipAfter16K);
    let r = execute(&[
        &s.url("DirectProxy"),
        "-c",
        "2",
        "-n",
        "20",
        "--size",
        "20000",
        "--verify",
        "direct",
    ]);
    assert_eq!((r.successes, r.errors.verify), (0, 20), "{}", r.summary());
    let good = start(Behaviour::Reference);
    let r = execute(&[
        &good.url("CBRTransportHeaderProxy"),
        "-c",
        "1",
        "-n",
        "5",
        "-H",
        "routing: nope",
        "--verify",
        "cbr-transport-header",
    ]);
    assert_eq!(r.errors.status, 5, "{}", r.summary());
    assert!(r
        .first_error
        .as_deref()
        .unwrap_or("")
        .contains("HTTP status 500"));
    // Without --verify, any 200 is a success (the classic rule), corrupted or not.
    let r = execute(&[
        &s.url("DirectProxy"),
        "-c",
        "1",
        "-n",
        "5",
        "--size",
        "20000",
    ]);
    assert_eq!(r.successes, 5);
}

#[test]
fn open_loop_keeps_the_arrival_rate_and_measures_from_intended_send_time() {
    let s = start(Behaviour::Delay(Duration::from_millis(30)));
    // 100/s over 4 connections with a 30 ms service time: each connection can serve 33/s,
    // so the schedule holds and latency stays near the service time.
    let r = execute(&[
        &s.url("DirectProxy"),
        "--rate",
        "100",
        "-c",
        "4",
        "-d",
        "1s",
        "--verify",
        "direct",
    ]);
    assert_eq!(r.mode, "open");
    assert!((80..=110).contains(&r.successes), "{}", r.summary());
    assert!(
        r.latency_ms.p50 >= 30.0 && r.latency_ms.p50 < 60.0,
        "{}",
        r.summary()
    );
    // One connection cannot keep 100/s at 30 ms each: latency from the intended send time
    // grows (no coordinated omission) instead of the rate silently dropping.
    let r = execute(&[
        &s.url("DirectProxy"),
        "--rate",
        "100",
        "-c",
        "1",
        "-d",
        "1s",
    ]);
    assert!(r.latency_ms.max > 300.0, "{}", r.summary());
}

/// When every connection is still waiting for an answer as requests come due, the requests
/// left unsent at the end are counted and said, in the summary and the JSON, instead of the
/// rate silently dropping; a server that keeps up leaves none.
#[test]
fn open_loop_counts_the_scheduled_requests_it_never_sent() {
    let s = start(Behaviour::Delay(Duration::from_millis(400)));
    // 20/s over 2 connections for 1 s: 20 requests due, but each connection can send one
    // every 400 ms (3 each, at 0, 400 and 800 ms).
    let r = execute(&[
        &s.url("DirectProxy"),
        "--rate",
        "20",
        "-c",
        "2",
        "-d",
        "1s",
        "--verify",
        "direct",
    ]);
    let sent = r.requests + 2; // the last request of each connection is still in flight
    assert!(r.unsent >= 10, "{}", r.summary());
    assert!(
        (19..=21).contains(&(sent + r.unsent)),
        "{sent} sent, {} unsent: {}",
        r.unsent,
        r.summary()
    );
    let summary = r.summary();
    assert!(
        summary.contains(&format!("{} scheduled requests never sent", r.unsent)),
        "{summary}"
    );
    assert!(summary.contains("give more connections"), "{summary}");
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["unsent"], r.unsent);

    let s = start(Behaviour::Delay(Duration::from_millis(10)));
    let r = execute(&[&s.url("DirectProxy"), "--rate", "20", "-c", "2", "-d", "1s"]);
    assert_eq!(r.unsent, 0, "{}", r.summary());
    assert!(r.summary().contains("0 scheduled requests never sent"));
    // The closed loop has no schedule.
    let r = execute(&[&s.url("DirectProxy"), "-c", "2", "-d", "200ms"]);
    assert_eq!(r.unsent, 0);
    assert!(!r.summary().contains("never sent"));
}

#[test]
fn legacy_tps_is_successes_over_mean_client_time() {
    let s = start(Behaviour::Delay(Duration::from_millis(20)));
    let r = execute(&[
        &s.url("DirectProxy"),
        "--legacy",
        "-c",
        "2",
        "-n",
        "10",
        "--verify",
        "direct",
    ]);
    let l = r.legacy.expect("legacy figures");
    assert_eq!(r.successes, 20);
    // Each client: 10 sequential requests of at least 20 ms each.
    assert!(
        l.mean_client_elapsed_s >= 0.2 && l.mean_client_elapsed_s < 0.35,
        "{l:?}"
    );
    assert!(l.tps <= 100.0 && l.tps > 57.0, "{l:?}");
    assert!((l.tps - 20.0 / l.mean_client_elapsed_s).abs() < 0.5);
    assert!((l.time_per_request_ms - 2000.0 / l.tps).abs() < 0.01);
    let csv = r.legacy_csv_line();
    let cols: Vec<&str> = csv.split(',').collect();
    assert_eq!(cols.len(), 8, "{csv}");
    assert_eq!(&cols[..6], &["DirectProxy", "1024", "2", "20", "0", "0"]);
    assert_eq!(cols[6].parse::<f64>().ok(), Some(l.tps));
    assert_eq!(LoadResult::LEGACY_CSV_HEADER.split(',').count(), 8);
    let block = r.legacy_block();
    assert!(block.contains("Complete requests:      20"));
    assert!(block.contains("Requests per second:"));
}

#[test]
fn json_output_round_trips_with_stable_field_names() {
    let s = start(Behaviour::Reference);
    let dir = support::temp_dir("json");
    let path = dir.join("out.json");
    let args = load_args(&[
        &s.url("DirectProxy"),
        "-c",
        "1",
        "-n",
        "10",
        "--json",
        path.to_str().expect("utf-8"),
    ]);
    let r = load::command(&args).expect("runs");
    let text = std::fs::read_to_string(&path).expect("written");
    let back: LoadResult = serde_json::from_str(&text).expect("parses");
    assert_eq!(back, r);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    for key in [
        "url",
        "mode",
        "concurrency",
        "elapsed_s",
        "requests",
        "successes",
        "errors",
        "tps",
        "latency_ms",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    for key in ["p50", "p90", "p95", "p99", "p999", "max"] {
        assert!(v["latency_ms"].get(key).is_some(), "missing latency {key}");
    }
    for key in ["connect", "timeout", "read", "write", "status", "verify"] {
        assert!(v["errors"].get(key).is_some(), "missing error class {key}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_input_is_refused_before_any_load() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let url = format!("http://127.0.0.1:{port}/service/DirectProxy");
    let err = load::plan_from_args(&load_args(&[&url, "-n", "1"])).expect_err("unreachable");
    assert!(err.to_string().contains(&url), "{err}");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(1));
    let s = start(Behaviour::Reference);
    let err =
        load::plan_from_args(&load_args(&[&s.url("X"), "--verify", "nope"])).expect_err("scenario");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2));
    let err = load::plan_from_args(&load_args(&[&s.url("X"), "--legacy"]))
        .expect_err("legacy without -n");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2));
    assert!(busbar_bench::parse_args(["bench", "load", "http://x/", "--size", "12"]).is_err());
    let err = load::plan_from_args(&load_args(&["https://127.0.0.1/"])).expect_err("https");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2));
}

/// A measurement of no time and a timeout of no time are usage errors (exit 2) naming the
/// option, in `load` as in `run` and `verify`, before anything is sent.
#[test]
fn zero_duration_and_zero_timeout_are_usage_errors_naming_the_option() {
    let url = "http://127.0.0.1:9/service/DirectProxy";
    for (argv, option) in [
        (&["bench", "load", url, "-d", "0s"][..], "--duration"),
        (&["bench", "load", url, "--duration", "0ms"], "--duration"),
        (&["bench", "load", url, "--timeout", "0s"], "--timeout"),
        (
            &[
                "bench",
                "verify",
                "http://127.0.0.1:9/service",
                "--timeout",
                "0s",
            ],
            "--timeout",
        ),
        (
            &[
                "bench",
                "run",
                "--base",
                "http://127.0.0.1:9/service",
                "--name",
                "x",
                "--out",
                "o",
                "--duration",
                "0s",
            ],
            "--duration",
        ),
        (
            &[
                "bench",
                "run",
                "--base",
                "http://127.0.0.1:9/service",
                "--name",
                "x",
                "--out",
                "o",
                "--timeout",
                "0s",
            ],
            "--timeout",
        ),
    ] {
        let err = busbar_bench::parse_args(argv).expect_err("refused");
        assert_eq!(err.exit_code(), 2, "{argv:?}");
        let text = err.to_string();
        assert!(
            text.contains(option) && text.contains("more than 0"),
            "{argv:?}: {text}"
        );
    }
    // Zero warm-up is what the default means: still accepted.
    assert!(busbar_bench::parse_args(["bench", "load", url, "--warmup", "0s", "-d", "1s"]).is_ok());
}

/// A server that reads requests and never answers: every client is counted as never answered,
/// none as an error; a server that answers leaves none unanswered, though each client has a
/// request waiting when the measurement ends. Each answer size is recorded per request.
#[test]
fn clients_that_never_get_an_answer_are_counted_apart() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in silent.incoming().take(3) {
            conns.push(c.expect("accept"));
        }
        std::thread::sleep(Duration::from_secs(3));
    });
    let r = execute(&[
        &format!("http://{addr}/service/DirectProxy"),
        "-c",
        "3",
        "-d",
        "500ms",
        "--size",
        "1024",
    ]);
    assert_eq!(
        (r.successes, r.errors.total(), r.unanswered),
        (0, 0, 3),
        "{}",
        r.summary()
    );
    held.join().expect("server");

    let s = start(Behaviour::Reference);
    let r = execute(&[
        &s.url("DirectProxy"),
        "-c",
        "3",
        "-d",
        "300ms",
        "--size",
        "1024",
    ]);
    assert!(r.successes > 0);
    assert_eq!(r.unanswered, 0, "{}", r.summary());
    assert_eq!(r.response_sizes.len(), 1);
    assert_eq!(r.response_sizes[0].sizes.len(), 1);
    assert_eq!(r.response_sizes[0].sizes[0].bytes, 1024);
    assert_eq!(r.response_sizes[0].sizes[0].count, r.successes);
}

/// A request sent during the warm-up that is still unanswered when the measurement ends leaves
/// its client unanswered: with a warm-up as without one, a server that takes every request and
/// answers none shows every client as never answered, not as an empty, error-free run.
#[test]
fn clients_whose_warm_up_request_is_never_answered_are_counted_as_unanswered() {
    // Connections complete in the listener's queue and requests are taken into the kernel's
    // buffers, but nothing is ever read or answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = silent.local_addr().expect("addr");
    let r = execute(&[
        &format!("http://{addr}/service/DirectProxy"),
        "-c",
        "3",
        "--warmup",
        "300ms",
        "-d",
        "500ms",
    ]);
    assert_eq!(
        (r.requests, r.errors.total(), r.unanswered),
        (0, 0, 3),
        "{}",
        r.summary()
    );
    assert!(
        r.summary().contains("clients never answered 3"),
        "{}",
        r.summary()
    );
    drop(silent);
}

/// A listener whose accept queue is full takes no new connection: its clients wait in connect
/// for the whole measurement, and each is counted as never answered, not left out of every
/// count.
#[test]
fn clients_still_connecting_when_the_measurement_ends_are_counted_as_unanswered() {
    // A queue of one that nothing accepts from: once one connection sits in it, the kernel
    // drops every further SYN, so connects neither complete nor fail within the test.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let full = rt
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.1:0".parse().expect("address"))?;
            socket.listen(0)?.into_std()
        })
        .expect("listener");
    let addr = full.local_addr().expect("addr");
    let plan = load::plan_from_args(&load_args(&[
        &format!("http://{addr}/service/DirectProxy"),
        "-c",
        "4",
        "-d",
        "500ms",
    ]))
    .expect("plan");
    // The reachability check above took the queue's one place; should it not still hold it,
    // this does.
    let _queued = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200));
    let r = load::execute(&plan).expect("runs");
    assert_eq!(
        (r.requests, r.errors.total(), r.unanswered),
        (0, 0, 4),
        "{}",
        r.summary()
    );
    drop(full);
}

/// A concurrency the process cannot hold is a usage error (exit 2) before anything runs: more
/// clients than the open-file limit leaves room for, naming the limit and how to raise it, and
/// an absurd count whatever the limit, in `load` as in `run` and `verify`.
#[test]
fn a_concurrency_past_the_open_file_limit_is_a_usage_error_naming_the_limit() {
    let url = "http://127.0.0.1:9/service/DirectProxy";
    let err = load::plan_from_args(&load_args(&[url, "-c", "4294967296", "-d", "1s"]))
        .expect_err("absurd concurrency");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2), "{err}");
    assert!(err.to_string().contains("1048576 clients at most"), "{err}");

    let Some((soft, _)) = load::open_file_limits() else {
        return;
    };
    if soft > load::MAX_CONCURRENCY as u64 {
        return;
    }
    let clients = soft.to_string();
    let err = load::plan_from_args(&load_args(&[url, "-c", &clients, "-d", "1s"]))
        .expect_err("past the open-file limit");
    assert_eq!(err.exit_code(), std::process::ExitCode::from(2), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!("open-file limit is {soft}")) && message.contains("ulimit"),
        "{message}"
    );
    for argv in [
        &[
            "bench",
            "run",
            "--base",
            url,
            "--name",
            "x",
            "--out",
            "/nonexistent/x",
        ][..],
        &["bench", "verify", url],
    ] {
        let mut argv = argv.to_vec();
        argv.extend(["--concurrency", &clients]);
        let cmd = busbar_bench::parse_args(argv).expect("parses");
        assert_eq!(
            busbar_bench::run(cmd),
            std::process::ExitCode::from(2),
            "{clients} clients"
        );
    }
    // What the limit holds is run.
    let s = start(Behaviour::Reference);
    let r = execute(&[&s.url("DirectProxy"), "-c", "2", "-n", "4"]);
    assert_eq!(r.successes, 4, "{}", r.summary());
}

/// `load --verify` fails (exit 1) when an answer fails its check, after the run; the same
/// answers without `--verify`, and correct answers with it, exit 0.
#[test]
fn load_with_verify_exits_1_when_an_answer_fails_its_check() {
    let exit = |argv: &[&str]| {
        let mut full = vec!["bench", "load"];
        full.extend_from_slice(argv);
        busbar_bench::run(busbar_bench::parse_args(full).expect("parses"))
    };
    let flipped = start(Behaviour::FlipAfter16K);
    let url = flipped.url("DirectProxy");
    let argv = [&url[..], "-c", "1", "-n", "3", "--size", "20000"];
    let verified = [&argv[..], &["--verify", "direct"]].concat();
    assert_eq!(exit(&verified), std::process::ExitCode::from(1));
    assert_eq!(exit(&argv), std::process::ExitCode::SUCCESS);
    let good = start(Behaviour::Reference);
    let url = good.url("DirectProxy");
    let argv = [&url[..], "-c", "1", "-n", "3", "--size", "20000"];
    let verified = [&argv[..], &["--verify", "direct"]].concat();
    assert_eq!(exit(&verified), std::process::ExitCode::SUCCESS);
}
