//! Deployment: the systemd notification protocol, `busbar health`, and the unit file and
//! Dockerfile checked by their own tools.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn free_addr() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

fn receive(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("a notification in time");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn kill(child: &std::process::Child, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status();
}

/// Under systemd (`NOTIFY_SOCKET` set), `READY=1` comes once the listener accepts connections,
/// a SIGHUP is announced with `RELOADING=1` and followed by `READY=1` (also when the new config
/// is broken: the old one keeps serving), and a stop with `STOPPING=1`.
#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let dir = temp_dir("notify");
    let socket_path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind notify socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let (listen, admin) = (free_addr(), free_addr());
    let config = dir.join("busbar.yaml");
    let yaml = format!(
        "workers: 1\nadmin: {{ bind: \"{admin}\" }}\nlisteners:\n  http: {{ bind: \"{listen}\" }}\nproxies:\n  P:\n    path: /p\n    in:\n      - respond: {{ status: 200, body: one }}\n"
    );
    std::fs::write(&config, &yaml).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("run")
        .arg(&config)
        .env("NOTIFY_SOCKET", &socket_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    assert_eq!(receive(&socket), "READY=1");
    // Ready means ready: the listener takes requests the moment the notification arrives.
    let r = Client::connect(listen)
        .get("/p")
        .expect("serving when ready");
    assert_eq!((r.status, r.text().as_str()), (200, "one"));

    std::fs::write(&config, yaml.replace("body: one", "body: two")).expect("write");
    kill(&child, "HUP");
    assert_eq!(receive(&socket), "RELOADING=1");
    let ready = receive(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains("reload applied"), "{ready}");
    let r = Client::connect(listen).get("/p").expect("after reload");
    assert_eq!(r.text(), "two");

    std::fs::write(&config, "proxies: [not, a, map]\n").expect("write");
    kill(&child, "HUP");
    assert_eq!(receive(&socket), "RELOADING=1");
    let ready = receive(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains("reload failed"), "{ready}");
    let r = Client::connect(listen)
        .get("/p")
        .expect("after a failed reload");
    assert_eq!(r.text(), "two");

    // SIGUSR1 (reopen the access log; there is none here) must not end the process, whose
    // default action it would be.
    kill(&child, "USR1");
    std::thread::sleep(Duration::from_millis(200));
    let r = Client::connect(listen).get("/p").expect("after SIGUSR1");
    assert_eq!(r.text(), "two");

    kill(&child, "TERM");
    assert_eq!(receive(&socket), "STOPPING=1");
    assert!(child.wait().expect("wait").success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `busbar health` is the container health check: 0 for a 2xx answer, 1 for anything else,
/// 2 for a URL it cannot use.
#[test]
fn health_exits_by_the_admin_answer() {
    let h = engine("proxies: {}\n");
    let health = |url: String| {
        Command::new(env!("CARGO_BIN_EXE_busbar"))
            .args(["health", &url, "--timeout", "2s"])
            .output()
            .expect("health")
    };
    let ok = health(format!("http://{}/healthz", h.admin()));
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = health(format!("http://{}/no-such-page", h.admin()));
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("answered 404"));
    let closed = health(format!("http://{}/healthz", free_addr()));
    assert_eq!(closed.status.code(), Some(1));
    assert_eq!(
        health("https://localhost/healthz".into()).status.code(),
        Some(2)
    );
    // A server that accepts and never answers: the timeout decides.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let started = std::time::Instant::now();
    let hung = Command::new(env!("CARGO_BIN_EXE_busbar"))
        .args(["health", "--timeout", "500ms"])
        .arg(format!(
            "http://{}/healthz",
            silent.local_addr().expect("addr")
        ))
        .output()
        .expect("health");
    assert_eq!(hung.status.code(), Some(1));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The unit file passes `systemd-analyze verify` without a warning (with ExecStart pointed at
/// this build, since the installed path does not exist here).
#[test]
fn the_systemd_unit_verifies() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing (Debian package systemd)"
        );
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    assert!(probe.status.success());
    let unit = std::fs::read_to_string(repo().join("packaging/busbar.service")).expect("unit");
    assert!(unit.contains("Type=notify"));
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    let dir = temp_dir("unit");
    let local = dir.join("busbar.service");
    std::fs::write(
        &local,
        unit.replace("/usr/local/bin/busbar", env!("CARGO_BIN_EXE_busbar")),
    )
    .expect("write");
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&local)
        .output()
        .expect("systemd-analyze");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.trim().is_empty(), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Dockerfile passes hadolint (installed by scripts/setup.sh into the interop venv), with
/// the project's `.hadolint.yaml`.
#[test]
fn the_dockerfile_passes_hadolint() {
    let hadolint = repo().join("target/interop/venv/bin/hadolint");
    if !hadolint.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "hadolint is missing: scripts/setup.sh installs it"
        );
        eprintln!("skipped: hadolint is not installed (scripts/setup.sh installs it)");
        return;
    }
    let out = Command::new(&hadolint)
        .arg("--no-color")
        .arg("Dockerfile")
        .current_dir(repo())
        .output()
        .expect("hadolint");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let docker = std::fs::read_to_string(repo().join("Dockerfile")).expect("Dockerfile");
    assert!(docker.contains("HEALTHCHECK"), "no health check");
    assert!(docker.contains("\nUSER "), "runs as root");
}

/// The config `make install` puts in /etc/busbar validates.
#[test]
fn the_installed_config_validates() {
    assert_validates(
        &repo().join("packaging/busbar.yaml"),
        std::iter::empty::<(&str, &str)>(),
    );
}
