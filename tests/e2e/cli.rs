use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn busbar() -> Command {
    Command::new(env!("CARGO_BIN_EXE_busbar"))
}

fn validate(yaml: &str) -> (i32, String) {
    let dir = temp_dir("validate");
    let file = dir.join("c.yaml");
    std::fs::write(&file, yaml).expect("write");
    let out = busbar().arg("validate").arg(&file).output().expect("run");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "c.yaml"),
    )
}

const OK: &str = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  echo: { url: \"http://127.0.0.1:9000/e\", timeout: 2s }\nproxies:\n  DirectProxy:\n    path: /p\n    in:\n      - call: echo\n";

#[test]
fn validate_reports_unknown_keys_with_file_line_and_name() {
    let (code, err) = validate(&OK.replace("timeout: 2s", "timout: 2s"));
    assert_eq!(code, 1);
    assert!(err.contains("c.yaml:4: unknown field `timout`"), "{err}");
}

#[test]
fn validate_reports_unknown_endpoints_with_their_path() {
    let (code, err) = validate(&OK.replace("call: echo", "call: ech"));
    assert_eq!(code, 1);
    assert!(
        err.contains("c.yaml:9: proxies.DirectProxy.in[0].call: unknown endpoint 'ech'"),
        "{err}"
    );
}

#[test]
fn an_endpoint_that_fails_to_build_is_reported_once_at_its_own_key() {
    // A bad TLS server name: at tls.server_name, not at url, and no "unknown endpoint" for the
    // call to it.
    let tls = "listeners:\n  http: { bind: \"127.0.0.1:0\" }\nendpoints:\n  secure:\n    url: \"https://127.0.0.1:9443/x\"\n    tls:\n      server_name: \"bad name!\"\nproxies:\n  P:\n    path: /p\n    in:\n      - call: secure\n";
    let (code, err) = validate(tls);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("c.yaml:7: endpoints.secure.tls.server_name: 'bad name!' cannot be used as a TLS server name"),
        "{err}"
    );
    assert!(
        err.contains("1 problem(s)") && !err.contains("unknown endpoint"),
        "{err}"
    );

    let (code, err) = validate(&OK.replace("timeout: 2s", "timeout: 2s, retry_on_status: [600]"));
    assert_eq!(code, 1);
    assert!(err.contains("endpoints.echo.retry_on_status"), "{err}");
    assert!(
        err.contains("1 problem(s)") && !err.contains("unknown endpoint"),
        "{err}"
    );
}

#[test]
fn listeners_of_one_config_on_one_address_are_refused_by_validate_and_run() {
    let port = free_port();
    let yaml = format!(
        "admin: {{ bind: \"127.0.0.1:{port}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nendpoints:\n  echo: {{ url: \"http://127.0.0.1:9000/e\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - call: echo\n"
    );
    let (code, err) = validate(&yaml);
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "c.yaml:1: admin.bind: 127.0.0.1:{port} overlaps listeners.http.bind"
        )),
        "{err}"
    );
    let dir = temp_dir("run-clash");
    let file = dir.join("c.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let out = busbar().arg("run").arg(&file).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("admin.bind") && err.contains("overlaps listeners.http.bind"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn validate_reports_bad_durations() {
    let (code, err) = validate(&OK.replace("timeout: 2s", "timeout: soon"));
    assert_eq!(code, 1);
    assert!(err.contains("c.yaml:4: invalid duration 'soon'"), "{err}");
}

#[test]
fn validate_reports_a_missing_file() {
    let out = busbar()
        .args(["validate", "/nonexistent/busbar.yaml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/busbar.yaml: cannot read config"),
        "{err}"
    );
}

#[test]
fn validate_accepts_a_good_config_with_a_summary() {
    let dir = temp_dir("validate-ok");
    let file = dir.join("c.yaml");
    std::fs::write(&file, OK).expect("write");
    let out = busbar().arg("validate").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains("valid (1 listeners, 1 endpoints, 0 sequences, 1 proxies)"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Asks `child` to stop gracefully (SIGTERM).
fn sigterm(child: &std::process::Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
}

/// Stops `child` gracefully and waits for its exit.
fn stop(child: &mut std::process::Child) -> std::process::ExitStatus {
    sigterm(child);
    child.wait().expect("wait")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Every example config validates, boots with its embedded back ends, answers `/readyz`, and
/// serves DirectProxy where it has one.
#[test]
fn every_example_validates_and_boots() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut seen = 0;
    // The examples folder and its subfolders (examples/orchestration/simple-invoke.yaml).
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(&examples).expect("examples dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            for sub in std::fs::read_dir(&path).expect("examples subfolder") {
                paths.push(sub.expect("entry").path());
            }
        } else {
            paths.push(path);
        }
    }
    for path in paths {
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&path).expect("example");
        // Every address variable of the file (`${BUSBAR_X:-host:port}`) on a free port. A port
        // found free can be taken by a parallel test before the example binds it: then the
        // example refuses to start, and it is tried again on other ports.
        let mut started = None;
        let mut last_err = String::new();
        for _attempt in 0..3 {
            let mut envs: Vec<(String, String)> = Vec::new();
            for (at, _) in text.match_indices("${BUSBAR_") {
                let rest = &text[at + 2..];
                let Some(end) = rest.find('}') else { continue };
                let Some((var, default)) = rest[..end].split_once(":-") else {
                    continue;
                };
                if default.parse::<std::net::SocketAddr>().is_ok()
                    && !envs.iter().any(|(k, _)| k == var)
                {
                    envs.push((var.to_owned(), format!("127.0.0.1:{}", free_port())));
                }
            }
            envs.push(("BUSBAR_WORKERS".to_owned(), "1".to_owned()));
            envs.push(("BUSBAR_KEYS".to_owned(), test_keys().display().to_string()));
            let addr_of = |var: &str| -> std::net::SocketAddr {
                envs.iter()
                    .find(|(k, _)| k == var)
                    .unwrap_or_else(|| panic!("{}: no {var}", path.display()))
                    .1
                    .parse()
                    .expect("addr")
            };
            let (listen, admin) = (addr_of("BUSBAR_LISTEN"), addr_of("BUSBAR_ADMIN"));
            assert_validates(&path, envs.clone());
            let log = std::env::temp_dir().join(format!(
                "busbar-example-{}-{}.log",
                std::process::id(),
                free_port()
            ));
            let mut child = busbar()
                .arg("run")
                .arg(&path)
                .envs(envs.clone())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log file"))
                .spawn()
                .expect("run");
            let up = eventually(Duration::from_secs(10), || {
                std::net::TcpStream::connect(listen).is_ok()
            });
            if up {
                let _ = std::fs::remove_file(&log);
                started = Some((child, listen, admin));
                break;
            }
            let _ = child.kill();
            let _ = child.wait();
            last_err = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = std::fs::remove_file(&log);
        }
        let Some((mut child, listen, admin)) = started else {
            panic!("{} did not start listening:\n{last_err}", path.display());
        };
        let ready = eventually(Duration::from_secs(10), || {
            Client::connect(admin)
                .get("/readyz")
                .is_ok_and(|r| r.status == 200)
        });
        assert!(ready, "{} did not become ready", path.display());
        if text.contains("path: /service/DirectProxy") {
            let body = payload(4096, 9);
            let r = Client::connect(listen)
                .post(
                    "/service/DirectProxy",
                    &[("Content-Type", "text/xml; charset=UTF-8")],
                    &body,
                )
                .expect("DirectProxy");
            assert_eq!(r.status, 200, "{}: {}", path.display(), r.text());
            assert_eq!(r.body, body);
        }
        // SIGTERM: graceful stop, exit code 0.
        let status = stop(&mut child);
        assert!(status.success(), "{}: exit {status:?}", path.display());
    }
    assert!(seen > 0, "no example configs found");
}

#[test]
fn validate_reports_an_unknown_key_an_unknown_step_and_an_unknown_endpoint_at_once() {
    let yaml = format!(
        "{}      - bogus_step: {{}}\n      - call: nope\n",
        OK.replace("timeout: 2s", "timout: 2s")
    );
    let (code, err) = validate(&yaml);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert_eq!(lines[3], "c.yaml: 3 problem(s)");
    assert!(
        lines[0].starts_with("c.yaml:4: unknown field `timout`")
            && lines[0].ends_with("(at endpoints.echo.timout)"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("c.yaml:10: unknown variant `bogus_step`")
            && lines[1].ends_with("(at proxies.DirectProxy.in[1])"),
        "{err}"
    );
    assert_eq!(
        lines[2],
        "c.yaml:11: proxies.DirectProxy.in[2].call: unknown endpoint 'nope'"
    );
}

#[test]
fn validate_gives_broken_files_one_clear_line_each() {
    let cases = [
        ("", "c.yaml: the config is empty"),
        (
            "- listeners\n",
            "c.yaml:1: a config is a mapping of sections",
        ),
        ("listeners:\n\thttp: {}\n", "c.yaml:2: tabs"),
        (
            &format!("{OK}proxies:\n  Q: {{ path: /q, in: [ {{ call: echo }} ] }}\n")[..],
            "c.yaml:10: duplicate key 'proxies'",
        ),
    ];
    for (yaml, start) in cases {
        let (code, err) = validate(yaml);
        assert_eq!(code, 1, "{yaml:?}: {err}");
        assert_eq!(err.lines().count(), 2, "{yaml:?}: {err}");
        assert!(err.starts_with(start), "{yaml:?}: {err}");
        assert!(err.ends_with("c.yaml: 1 problem(s)\n"), "{yaml:?}: {err}");
    }
}

#[test]
fn validate_stops_after_a_hundred_errors() {
    let mut yaml = OK.to_owned();
    yaml.push_str("log:\n");
    for i in 0..200 {
        yaml.push_str(&format!("  level{i}: x\n"));
    }
    let started = std::time::Instant::now();
    let (code, err) = validate(&yaml);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 102, "{err}");
    assert!(err.contains("c.yaml:110: unknown field `level99`"), "{err}");
    assert!(
        err.ends_with("c.yaml: more errors follow; stopped after 100\nc.yaml: 101 problem(s)\n"),
        "{err}"
    );
}

#[test]
fn validate_takes_a_bare_file_name_from_the_config_directory() {
    let dir = temp_dir("validate-bare");
    std::fs::write(
        dir.join("t.xsl"),
        "<xsl:stylesheet version='1.0' xmlns:xsl='http://www.w3.org/1999/XSL/Transform'/>",
    )
    .expect("write");
    let yaml = OK.replace(
        "      - call: echo\n",
        "      - xslt: { stylesheet: t.xsl }\n      - call: echo\n",
    );
    std::fs::write(dir.join("c.yaml"), yaml).expect("write");
    let out = busbar()
        .arg("validate")
        .arg("c.yaml")
        .current_dir(&dir)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A failed step is logged once, named by its config path, whether or not `on_error` runs.
#[test]
fn a_failed_call_is_logged_once_with_the_steps_config_path() {
    let dir = temp_dir("log-once");
    let (listen, dead) = (free_port(), free_port());
    let yaml = format!(
        "workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nendpoints:\n  dead: {{ url: \"http://127.0.0.1:{dead}/x\", connect_timeout: 1s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - call: dead\n  Q:\n    path: /q\n    in:\n      - call: dead\n    on_error:\n      - log: {{ message: handling, level: debug }}\n"
    );
    let file = dir.join("c.yaml");
    std::fs::write(&file, yaml).expect("write");
    let child = busbar()
        .arg("run")
        .arg(&file)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{listen}").parse().expect("addr");
    let up = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    assert!(up, "did not start listening");
    for path in ["/p", "/q"] {
        let r = Client::connect(addr).post(path, &[], b"x").expect("answer");
        assert_eq!(r.status, 502, "{}", r.text());
    }
    sigterm(&child);
    let out = child.wait_with_output().expect("wait");
    let log = String::from_utf8_lossy(&out.stderr);
    // stderr is a pipe here, not a terminal: no colour escape sequences in the log.
    assert!(
        !log.contains('\x1b'),
        "escape sequences in a piped log:\n{log}"
    );
    for step in ["proxies.P.in[0].call", "proxies.Q.in[0].call"] {
        let lines = log
            .lines()
            .filter(|l| l.contains(step) && l.contains("refused the connection"))
            .count();
        assert_eq!(lines, 1, "{step} logged {lines} times:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `yaml(port)` for a free port into `dir`, starts `busbar run` on it with `env` and waits
/// until it listens. `Err` with what it logged when it stopped first, or never listened.
fn run_on_free_port(
    dir: &Path,
    yaml: impl Fn(u16) -> String,
    env: &[(&str, &str)],
) -> Result<(std::process::Child, std::net::SocketAddr), String> {
    let listen = free_port();
    let file = dir.join("c.yaml");
    std::fs::write(&file, yaml(listen)).expect("write");
    let log = dir.join("busbar.log");
    let mut child = busbar()
        .arg("run")
        .arg(&file)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("run");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{listen}").parse().expect("addr");
    let up = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok() || child.try_wait().ok().flatten().is_some()
    });
    if up && child.try_wait().ok().flatten().is_none() {
        return Ok((child, addr));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(std::fs::read_to_string(&log).unwrap_or_default())
}

/// With the access log on standard output, standard output holds its lines and nothing else:
/// the addresses busbar prints at start go to standard error.
#[test]
fn an_access_log_on_stdout_has_stdout_to_itself() {
    let dir = temp_dir("access-stdout");
    let listen = free_port();
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        format!(
            "workers: 1\nadmin: {{ enabled: false }}\naccess_log: {{ format: json }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {{ body: ok }}\n"
        ),
    )
    .expect("write");
    let (out, err) = (dir.join("out"), dir.join("err"));
    let mut child = busbar()
        .arg("run")
        .arg(&file)
        .stdout(std::fs::File::create(&out).expect("out"))
        .stderr(std::fs::File::create(&err).expect("err"))
        .spawn()
        .expect("run");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{listen}").parse().expect("addr");
    assert!(eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok()
    }));
    for _ in 0..3 {
        let resp = Client::connect(addr).get("/p").expect("GET /p");
        assert_eq!(resp.status, 200);
    }
    assert!(stop(&mut child).success());
    let stdout = std::fs::read_to_string(&out).expect("stdout");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        let record: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not an access log line ({e}): {line}"));
        assert_eq!(record["target"], "/p", "{line}");
    }
    let stderr = std::fs::read_to_string(&err).expect("stderr");
    assert!(
        stderr.contains(&format!("listener http on http://127.0.0.1:{listen}")),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SIGTERM sent as soon as the listener accepts connections stops the engine gracefully:
/// the signal handlers are in place before anything listens.
#[test]
fn sigterm_right_after_start_is_a_graceful_stop() {
    let dir = temp_dir("early-term");
    for _ in 0..5 {
        let yaml = |listen| {
            format!(
                "workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {{}}\n"
            )
        };
        let (mut child, _) = run_on_free_port(&dir, yaml, &[])
            .unwrap_or_else(|log| panic!("did not start listening: {log}"));
        let status = stop(&mut child);
        assert!(status.success(), "exit {status:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `busbar --version` names the version and the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let out = busbar().arg("--version").output().expect("--version");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let expected_prefix = format!("busbar {} (", env!("CARGO_PKG_VERSION"));
    assert!(text.starts_with(&expected_prefix), "{text}");
    let commit = text[expected_prefix.len()..].trim_end_matches(')');
    let hash = commit.trim_end_matches("-dirty");
    if hash != "unknown" {
        assert!(
            hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit()),
            "{text}"
        );
        if let Ok(head) = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
        {
            if head.status.success() {
                assert_eq!(hash, String::from_utf8_lossy(&head.stdout).trim(), "{text}");
            }
        }
    }
}

/// Environment values are data, not YAML: quotes, backslashes, `#` and braces in a value
/// referenced inside a quoted scalar reach the message as they were set, and a line break where
/// it would start a new key is refused when the config loads, naming the file, line and variable.
#[test]
fn environment_values_reach_the_config_as_data() {
    let back_end = header_back_end(&["x-secret", "x-other"]);
    let dir = temp_dir("env-data");
    let yaml = |listen| {
        format!(
            "workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nendpoints:\n  b: {{ url: \"http://{back_end}/x\", timeout: 2s }}\nproxies:\n  P:\n    path: /p\n    in:\n      - set_header: {{ name: x-secret, value: \"${{SECRET}}\" }}\n      - set_header: {{ name: x-other, value: '${{SECRET}}' }}\n      - call: b\n"
        )
    };
    let secret = r#"a"b\n 'c' #d: {e: [f]} \"#;
    // A free port can be taken by a parallel test before busbar binds it: then another.
    let mut started = Err(String::new());
    for _ in 0..3 {
        started = run_on_free_port(&dir, yaml, &[("SECRET", secret)]);
        if !matches!(&started, Err(log) if log.contains("Address already in use")) {
            break;
        }
    }
    let (mut child, addr) = started.unwrap_or_else(|log| panic!("busbar did not start: {log}"));
    let resp = Client::connect(addr).get("/p");
    let _ = child.kill();
    let _ = child.wait();
    let resp = resp.expect("GET /p");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.text(), format!("{secret}|{secret}"));

    let file = dir.join("lines.yaml");
    let yaml = format!("{OK}      - set_header: {{ name: x-a, value: ${{SECRET}} }}\n");
    std::fs::write(&file, &yaml).expect("write");
    let out = busbar()
        .arg("validate")
        .arg(&file)
        .env("SECRET", "x\nadmin: { bind: \"0.0.0.0:1\" }")
        .output()
        .expect("validate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = yaml.lines().count();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:{line}: environment variable 'SECRET' holds a line break",
            file.display()
        )),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `busbar health` against a server that accepts and never answers says it timed out, after
/// how long, rather than the system's word for it; a URL that is not http:// is a usage error
/// (2), as its help says.
#[test]
fn health_names_a_timeout_and_refuses_a_non_http_url_as_a_usage_error() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/healthz", silent.local_addr().expect("addr"));
    let held = std::thread::spawn(move || {
        // Accept and hold the connection without a word until the client gives up.
        let (mut conn, _) = silent.accept().expect("accept");
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut conn, &mut sink);
    });
    let out = busbar()
        .args(["health", &url, "--timeout", "1s"])
        .output()
        .expect("health");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("timed out after 1s"), "{err}");
    assert!(!err.contains("os error"), "{err}");
    held.join().expect("server");

    let out = busbar()
        .args(["health", "ftp://127.0.0.1/healthz"])
        .output()
        .expect("health");
    assert_eq!(out.status.code(), Some(2));
    let help = busbar().args(["health", "--help"]).output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("1 otherwise, 2 for a URL that is not http://"),
        "{help}"
    );
}

/// The SecureProxy config the WS-Security benchmark scripts serve (bench/secure-legacy.yaml)
/// validates, boots with its embedded echo, refuses a message that is not secured with a SOAP
/// fault, and answers fresh signed and encrypted messages that the load generator decrypts and
/// verifies; it stops cleanly.
#[test]
fn the_ws_security_bench_config_boots_and_serves_secured_messages() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/secure-legacy.yaml");
    let keys = test_keys();
    let (listen, echo) = (free_port(), free_port());
    let envs = [
        ("BUSBAR_KEYS", keys.display().to_string()),
        ("BUSBAR_LISTEN", format!("127.0.0.1:{listen}")),
        ("BUSBAR_ECHO", format!("127.0.0.1:{echo}")),
    ];
    assert_validates(&config, envs.clone());
    let mut child = busbar()
        .arg("run")
        .arg(&config)
        .envs(envs)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{listen}").parse().expect("addr");
    let up = eventually(Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).is_ok()
    });
    if !up {
        let _ = child.kill();
        panic!("bench/secure-legacy.yaml did not start listening");
    }
    let plain = Client::connect(addr)
        .post(
            "/service/SecureProxy",
            &[("Content-Type", "text/xml; charset=UTF-8")],
            &payload(1024, 3),
        )
        .expect("answer");
    assert_eq!(plain.status, 500, "{}", plain.text());
    assert!(plain.text().contains("wsse:"), "{}", plain.text());
    let load = busbar()
        .args(["bench", "load"])
        .arg(format!("http://{addr}/service/SecureProxy"))
        .args(["--size", "1024", "-c", "2", "-n", "6", "--pool", "6"])
        .args(["--verify", "secure", "--keys"])
        .arg(&keys)
        .output()
        .expect("bench load");
    let report = String::from_utf8_lossy(&load.stdout);
    assert!(
        load.status.success() && report.contains("6 ok"),
        "{report}{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let status = stop(&mut child);
    assert!(status.success(), "exit {status:?}");
}

/// A config, or a file it names, that is a device never ending or a file past the bound every
/// such file has, is refused with the file's key, not read until memory runs out.
#[test]
fn files_a_config_names_are_read_with_a_bound() {
    let out = busbar()
        .args(["validate", "/dev/zero"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/dev/zero: cannot read config: larger than 16 MiB"),
        "{err}"
    );

    let dir = temp_dir("validate-bound");
    // Sparse: 16 MiB and one byte, on disk as nothing.
    let big = dir.join("big.xsl");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len(16 * 1024 * 1024 + 1).expect("grow");
    std::fs::copy(&big, dir.join("big.jq")).expect("copy");
    let yaml = "\
echo:
  bind: \"127.0.0.1:0\"
  json_file: /dev/zero
listeners:
  http:
    bind: \"127.0.0.1:0\"
    tls: { cert: /dev/zero, key: /dev/zero }
databases:
  db:
    path: \":memory:\"
    init: /dev/zero
endpoints:
  echo: { url: \"http://127.0.0.1:9000/e\" }
  secure:
    url: \"https://127.0.0.1:9443/e\"
    tls: { ca: /dev/zero }
proxies:
  P:
    path: /p
    in:
      - xslt: { stylesheet: /dev/zero }
      - jq: { file: /dev/zero }
      - call: echo
  Q:
    path: /q
    in:
      - xslt: { stylesheet: big.xsl }
      - jq: { file: big.jq }
";
    let file = dir.join("c.yaml");
    std::fs::write(&file, yaml).expect("write");
    let out = busbar().arg("validate").arg(&file).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "c.yaml");
    assert_eq!(out.status.code(), Some(1), "{err}");
    for (line, key, why) in [
        (3, "echo.json_file", "not a regular file: /dev/zero"),
        (
            7,
            "listeners.http.tls.cert",
            "not a regular file: /dev/zero",
        ),
        (7, "listeners.http.tls:", "larger than 16 MiB"),
        (11, "databases.db.init", "not a regular file: /dev/zero"),
        (
            16,
            "endpoints.secure.tls.ca",
            "not a regular file: /dev/zero",
        ),
        (
            21,
            "proxies.P.in[0].xslt.stylesheet",
            "not a regular file: /dev/zero",
        ),
        (22, "proxies.P.in[1].jq.file", "larger than 16 MiB"),
        (27, "proxies.Q.in[0].xslt.stylesheet", "larger than 16 MiB"),
        (28, "proxies.Q.in[1].jq.file", "larger than 16 MiB"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with(&format!("c.yaml:{line}: {key}")) && l.contains(why)),
            "line {line}, {key}, {why}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Text a log line carries from a request (here an `xsl:message` of the request's content)
/// cannot break the line: its line breaks and control characters are written escaped.
#[test]
fn request_text_in_a_log_line_cannot_forge_another_line() {
    let dir = temp_dir("log-forge");
    std::fs::write(
        dir.join("msg.xsl"),
        "<xsl:stylesheet version=\"1.0\" xmlns:xsl=\"http://www.w3.org/1999/XSL/Transform\">\
         <xsl:template match=\"/\"><xsl:message><xsl:value-of select=\"/a\"/></xsl:message>\
         <b/></xsl:template></xsl:stylesheet>",
    )
    .expect("stylesheet");
    let yaml = |listen| {
        format!(
            "workers: 1\nadmin: {{ enabled: false }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{listen}\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - xslt: {{ stylesheet: msg.xsl }}\n      - respond: {{}}\n"
        )
    };
    let (mut child, addr) = run_on_free_port(&dir, yaml, &[])
        .unwrap_or_else(|log| panic!("did not start listening: {log}"));
    let r = Client::connect(addr)
        .post(
            "/p",
            &[("Content-Type", "text/xml")],
            b"<a>hello&#10;2026-01-01T00:00:00Z ERROR forged&#13;&#9;x</a>",
        )
        .expect("answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(stop(&mut child).success());
    let log = std::fs::read_to_string(dir.join("busbar.log")).expect("log");
    assert!(
        log.lines()
            .any(|l| l.contains("xsl:message: hello\\n2026-01-01T00:00:00Z ERROR forged\\r")),
        "{log}"
    );
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01")), "{log}");
    assert!(!log.contains('\x1b') && !log.contains('\r'), "{log:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sequences `s0` → `s1` → … run by proxy `/p`, with as many `scatter_gather` steps nested in
/// each (the step that takes the most stack per level) as YAML allows, so that the deepest
/// step, a call to `echo`, runs at level `deepest` (the proxy's own step is level 1).
fn nested_sequences(deepest: usize, backend: std::net::SocketAddr) -> String {
    let mut seqs = String::new();
    let mut level = 2;
    for i in 0.. {
        let wraps = (deepest - level).min(8);
        let inner = level + wraps;
        let mut step = if inner == deepest {
            "{ call: echo }".to_owned()
        } else {
            format!("{{ sequence: s{} }}", i + 1)
        };
        for _ in 0..wraps {
            step = format!(
                "{{ scatter_gather: {{ branches: [ {{ name: b, steps: [ {step} ] }} ] }} }}"
            );
        }
        seqs.push_str(&format!("  s{i}: [ {step} ]\n"));
        if inner == deepest {
            break;
        }
        level = inner + 1;
    }
    format!(
        "workers: 1\nadmin: {{ enabled: false }}\nendpoints:\n  echo: {{ url: \"http://{backend}/e\" }}\nproxies:\n  P: {{ path: /p, in: [ {{ sequence: s0 }} ] }}\nsequences:\n{seqs}"
    )
}

/// Steps nested as deep as the limit allows (32 levels, counted through the sequences they
/// run) serve a request on a worker's stack; one level more is refused by `validate` and
/// `run` alike, at the proxy that runs them, instead of taking the process down.
#[test]
fn steps_nested_to_the_limit_serve_and_one_level_more_is_refused() {
    let echo = echo(busbar_engine::echo::EchoOptions::default());
    let dir = temp_dir("nesting");
    let at_limit = nested_sequences(32, echo.addr);
    let (mut child, addr) = run_on_free_port(
        &dir,
        |port| format!("listeners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\n{at_limit}"),
        &[],
    )
    .expect("busbar runs");
    let r = Client::connect(addr)
        .post("/p", &[("content-type", "application/json")], b"{}")
        .expect("an answer");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().starts_with("{\"b\":{\"b\":"), "{}", r.text());
    assert!(child.try_wait().expect("wait").is_none(), "busbar exited");
    assert!(stop(&mut child).success());

    let past = format!(
        "listeners:\n  http: {{ bind: \"127.0.0.1:0\" }}\n{}",
        nested_sequences(33, echo.addr)
    );
    let (code, err) = validate(&past);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.starts_with(
            "c.yaml:8: proxies.P.in[0].sequence: steps nest 33 levels deep here, through sequences 's0' → 's1' → 's2' → 's3'; at most 32 are allowed\n"
        ),
        "{err}"
    );
    let file = dir.join("past.yaml");
    std::fs::write(&file, &past).expect("write");
    let out = busbar().arg("run").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("past.yaml:8: proxies.P.in[0].sequence: steps nest 33 levels deep here"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload (SIGHUP or `POST /reload`) into a config whose sequences nest thousands of levels
/// deep, run by no proxy, is refused and the old config keeps serving: checking and building
/// it follow no chain of references on the reloading thread's stack.
#[test]
fn a_reload_into_sequences_nested_thousands_deep_is_refused_and_the_old_config_serves() {
    let dir = temp_dir("nesting-reload");
    let admin = free_port();
    let base = |port: u16| {
        format!("listeners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nproxies:\n  P: {{ path: /p, in: [ {{ respond: {{ body: old }} }} ] }}\n")
    };
    let (mut child, addr) = run_on_free_port(&dir, base, &[]).expect("busbar runs");
    let served = std::fs::read_to_string(dir.join("c.yaml")).expect("read");
    let mut deep = format!("{served}sequences:\n");
    for i in 0..1500 {
        deep.push_str(&format!("  s{i}: [ {{ sequence: s{} }} ]\n", i + 1));
    }
    deep.push_str("  s1500: [ { respond: { body: new } } ]\n");
    std::fs::write(dir.join("c.yaml"), &deep).expect("write");
    let _ = Command::new("kill")
        .arg("-HUP")
        .arg(child.id().to_string())
        .status();
    let mut req = Client::connect(format!("127.0.0.1:{admin}").parse().expect("addr"));
    req.send_raw(b"POST /reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    let r = req.read_response().expect("reload answer");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text()
            .contains("c.yaml:7: sequences.s0: steps nest 1501 levels deep here"),
        "{}",
        r.text()
    );
    let log = || std::fs::read_to_string(dir.join("busbar.log")).unwrap_or_default();
    // The SIGHUP's reload, on a thread of its own, is refused too.
    assert!(
        eventually(Duration::from_secs(10), || log()
            .matches("reload failed")
            .count()
            == 2),
        "{}",
        log()
    );
    let r = Client::connect(addr).post("/p", &[], b"").expect("served");
    assert_eq!(r.body, b"old");
    assert!(child.try_wait().expect("wait").is_none(), "busbar exited");
    assert!(stop(&mut child).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `validate` reports a sequence that runs itself (used or not, directly or through another)
/// as `run` does, and exits 1, rather than building it.
#[test]
fn validate_reports_sequences_that_run_themselves_as_run_does() {
    let dir = temp_dir("cycles");
    let yaml = format!(
        "{OK}sequences:\n  a: [ {{ sequence: a }} ]\n  b: [ {{ sequence: c }} ]\n  c: [ {{ sequence: b }} ]\n"
    );
    let (code, err) = validate(&yaml);
    assert_eq!(code, 1, "{err}");
    let expected = "c.yaml:11: sequences.a: sequence 'a' runs itself (through 'a')\nc.yaml:12: sequences.b: sequence 'c' runs itself (through 'b')\nc.yaml:13: sequences.c: sequence 'b' runs itself (through 'c')\n";
    assert_eq!(err, format!("{expected}c.yaml: 3 problem(s)\n"));
    let file = dir.join("c.yaml");
    std::fs::write(&file, &yaml).expect("write");
    let out = busbar().arg("run").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "c.yaml"),
        expected
    );
    // With another problem beside the cycle, validate still reports both and stops there.
    let (code, err) = validate(&yaml.replace("call: echo", "call: nope"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(expected), "{err}");
    assert!(
        err.contains("c.yaml:9: proxies.DirectProxy.in[0].call: unknown endpoint 'nope'\n"),
        "{err}"
    );
    assert!(err.ends_with("c.yaml: 4 problem(s)\n"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A misspelt log level is refused with its file, line and key, whether written in the config
/// or given by the variable it names (`BUSBAR_LOG` in the examples); tracing would take it for
/// a target name and log nothing at all, errors included.
#[test]
fn a_misspelt_log_level_is_refused_and_a_misspelt_rust_log_ignored() {
    let dir = temp_dir("log-level");
    let file = dir.join("c.yaml");
    std::fs::write(
        &file,
        format!("log: {{ level: \"${{BUSBAR_LOG:-info}}\" }}\n{OK}"),
    )
    .expect("write");
    for cmd in ["validate", "run"] {
        for (value, shown) in [("warnning", "warnning"), ("info\"", "info\"")] {
            let out = busbar()
                .arg(cmd)
                .arg(&file)
                .env("BUSBAR_LOG", value)
                .output()
                .expect("busbar");
            let err =
                String::from_utf8_lossy(&out.stderr).replace(&file.display().to_string(), "c.yaml");
            assert_eq!(out.status.code(), Some(1), "{cmd} {value}: {err}");
            assert!(
                err.starts_with(&format!("c.yaml:1: log.level: '{shown}' is not a log level: give trace, debug, info, warn, error or off")),
                "{cmd} {value}: {err}"
            );
        }
    }
    let (code, err) = validate(&format!(
        "log: {{ level: \"ERROR,busbar_engine=debug\" }}\n{OK}"
    ));
    assert_eq!(code, 0, "{err}");

    // RUST_LOG overrides log.level; one that is not a filter is ignored, and said so, and the
    // config's level holds: the failed call is logged.
    let dead = free_port();
    let (mut child, addr) = run_on_free_port(
        &dir,
        |port| format!("workers: 1\nadmin: {{ enabled: false }}\nlog: {{ level: warn }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nendpoints:\n  dead: {{ url: \"http://127.0.0.1:{dead}/x\", connect_timeout: 1s }}\nproxies:\n  P: {{ path: /p, in: [ {{ call: dead }} ] }}\n"),
        &[("RUST_LOG", "warnning")],
    )
    .expect("busbar runs");
    let r = Client::connect(addr).post("/p", &[], b"x").expect("answer");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(stop(&mut child).success());
    let log = std::fs::read_to_string(dir.join("busbar.log")).unwrap_or_default();
    assert!(
        log.starts_with("RUST_LOG: 'warnning' is not a log level"),
        "{log}"
    );
    assert!(log.contains("ignored, logging at 'warn'"), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("proxies.P.in[0].call") && l.contains("refused the connection")),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes `text` to the config `file` of the busbar whose admin listener is `admin` and
/// reloads it: the admin's answer.
fn reload_with(admin: std::net::SocketAddr, file: &Path, text: &str) -> Resp {
    std::fs::write(file, text).expect("write the config");
    Client::connect(admin)
        .request("POST", "/reload", &[], b"")
        .expect("reload answered")
}

/// An endpoint a reload leaves as it was keeps its state: an open breaker stays open (a reload
/// by config management every minute must not let calls through to a back end that is down).
#[test]
fn a_reload_keeps_an_unchanged_endpoints_breaker() {
    let dir = temp_dir("breaker-reload");
    let (admin, dead) = (free_port(), free_port());
    let yaml = move |port: u16| {
        format!("workers: 1\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nendpoints:\n  dead: {{ url: \"http://127.0.0.1:{dead}/x\", breaker: {{ failures: 3, suspend: 60s }} }}\nproxies:\n  P: {{ path: /p, in: [ {{ call: dead }} ] }}\n  Q: {{ path: /q, in: [ {{ respond: {{ body: one }} }} ] }}\n")
    };
    let (mut child, addr) = run_on_free_port(&dir, yaml, &[]).expect("busbar runs");
    let file = dir.join("c.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let status = || {
        Client::connect(addr)
            .post("/p", &[], b"x")
            .expect("answer")
            .status
    };
    let statuses: Vec<u16> = (0..4).map(|_| status()).collect();
    assert_eq!(statuses, [502, 502, 502, 503]);
    for body in ["two", "one"] {
        let r = reload_with(
            admin,
            &file,
            &text.replace("body: one", &format!("body: {body}")),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(status(), 503, "the breaker closed with the reload");
    }
    // A changed endpoint is a new one, breaker closed.
    let r = reload_with(admin, &file, &text.replace("failures: 3", "failures: 4"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(status(), 502);
    assert!(stop(&mut child).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Metrics follow the running config: a proxy a reload renamed leaves `/metrics` once its
/// requests are done, so reloads that rename things do not grow the page without end.
#[test]
fn metrics_of_a_proxy_a_reload_took_away_are_dropped() {
    let dir = temp_dir("metrics-reload");
    let admin = free_port();
    let yaml = move |port: u16| {
        format!("workers: 1\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nproxies:\n  Name0: {{ path: /p, in: [ {{ respond: {{ body: ok }} }} ] }}\n")
    };
    let (mut child, addr) = run_on_free_port(&dir, yaml, &[]).expect("busbar runs");
    let file = dir.join("c.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let metrics = || {
        Client::connect(admin)
            .get("/metrics")
            .expect("metrics")
            .text()
    };
    for n in 1..=20 {
        let r = reload_with(admin, &file, &text.replace("Name0", &format!("Name{n}")));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(Client::connect(addr).get("/p").expect("answer").status, 200);
    }
    let page = metrics();
    assert!(
        page.contains("busbar_proxy_requests_total{proxy=\"Name20\"} 1"),
        "{page}"
    );
    for n in 0..20 {
        assert!(
            !page.contains(&format!("\"Name{n}\"")),
            "Name{n} is still there:\n{page}"
        );
    }
    assert!(stop(&mut child).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Settings fixed at start (the echo back ends, the drain) make a reload that changes them
/// refuse, naming them: it said `reloaded` and showed them in `/config` though they were not
/// in force.
#[test]
fn a_reload_refuses_changes_that_only_a_restart_applies() {
    let dir = temp_dir("restart-only");
    let (admin, echo) = (free_port(), free_port());
    let yaml = move |port: u16| {
        format!("workers: 1\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nshutdown: {{ drain_timeout: 3s }}\necho: {{ bind: \"127.0.0.1:{echo}\", delay: 1ms }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nproxies:\n  P: {{ path: /p, in: [ {{ respond: {{ body: ok }} }} ] }}\n")
    };
    let (mut child, _) = run_on_free_port(&dir, yaml, &[]).expect("busbar runs");
    let file = dir.join("c.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    for (changed, key) in [
        (text.replace("delay: 1ms", "delay: 100ms"), "echo"),
        (
            text.replace("drain_timeout: 3s", "drain_timeout: 1s"),
            "shutdown",
        ),
    ] {
        let r = reload_with(admin, &file, &changed);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(
            r.text().contains(&format!(
                "{key}: changed: these take effect only after a restart; nothing was reloaded"
            )),
            "{}",
            r.text()
        );
    }
    let r = reload_with(admin, &file, &text.replace("body: ok", "body: new"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(stop(&mut child).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload applies a changed `log.level` to the running process; a changed `log.format`,
/// which only a restart can apply, makes the reload refuse the config and say so, as a
/// changed listener does.
#[test]
fn a_reload_applies_the_log_level_and_refuses_a_new_log_format() {
    let dir = temp_dir("log-reload");
    let (admin, dead) = (free_port(), free_port());
    let yaml = move |port: u16| {
        format!("workers: 1\nlog: {{ level: info, format: text }}\nadmin: {{ bind: \"127.0.0.1:{admin}\" }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:{port}\" }}\nendpoints:\n  dead: {{ url: \"http://127.0.0.1:{dead}/x\", connect_timeout: 1s }}\nproxies:\n  P: {{ path: /p, in: [ {{ call: dead }} ] }}\n")
    };
    let (mut child, addr) = run_on_free_port(&dir, yaml, &[]).expect("busbar runs");
    let file = dir.join("c.yaml");
    let text = std::fs::read_to_string(&file).expect("read");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let reload = |text: &str| {
        std::fs::write(&file, text).expect("write");
        let mut req = Client::connect(admin);
        req.send_raw(b"POST /reload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
        req.read_response().expect("reload answer")
    };
    let log = || std::fs::read_to_string(dir.join("busbar.log")).unwrap_or_default();
    let refused = |log: &str| log.matches("refused the connection").count();
    let call = |path: &str| {
        let r = Client::connect(addr).post(path, &[], b"x").expect("answer");
        assert_eq!(r.status, 502, "{}", r.text());
    };

    call("/p");
    assert!(
        eventually(Duration::from_secs(5), || refused(&log()) == 1),
        "{}",
        log()
    );
    let r = reload(&text.replace("level: info", "level: error"));
    assert_eq!(r.status, 200, "{}", r.text());
    call("/p");
    let r = reload(&text.replace("level: info", "level: warn"));
    assert_eq!(r.status, 200, "{}", r.text());
    call("/p");
    // The call made at `error` logged nothing; the one made at `warn` did.
    assert!(
        eventually(Duration::from_secs(5), || refused(&log()) == 2),
        "{}",
        log()
    );

    let r = reload(&text.replace("format: text", "format: json"));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains(
            "log.format: changed: these take effect only after a restart; nothing was reloaded"
        ),
        "{}",
        r.text()
    );
    call("/p");
    assert!(stop(&mut child).success());
    let log = log();
    assert_eq!(refused(&log), 3, "{log}");
    assert!(
        log.lines().all(|l| !l.starts_with('{')),
        "a JSON line after a refused reload:\n{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
