use std::process::Command;

use busbar_engine::echo::EchoOptions;

use crate::support::*;

/// A self-signed certificate for localhost, made with openssl at test time.
fn make_cert(dir: &std::path::Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
        ],
    );
}

fn tls_engine(extra: &str) -> (Harness, std::path::PathBuf) {
    let certs = temp_dir("certs");
    make_cert(&certs);
    let listener = format!(
        "  https: {{ bind: \"127.0.0.1:0\", tls: {{ cert: \"{}\", key: \"{}\" }} }}",
        certs.join("cert.pem").display(),
        certs.join("key.pem").display()
    );
    let yaml = extra.replace("LISTENER", &listener);
    (engine(&yaml), certs)
}

#[test]
fn tls_listener_serves_https_byte_for_byte() {
    let echo = echo(EchoOptions::default());
    let (h, certs) = tls_engine(&format!("LISTENER\n{}", direct_proxy_yaml(echo.addr, "5s")));
    let port = h.engine().listeners["https"].port();
    let body_file = certs.join("body.bin");
    let body = payload(70_000, 5);
    std::fs::write(&body_file, &body).expect("write body");
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(certs.join("cert.pem"))
        .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
        .args(["-H", "Content-Type: text/xml", "--data-binary"])
        .arg(format!("@{}", body_file.display()))
        .arg(format!("https://localhost:{port}/service/DirectProxy"))
        .output()
        .expect("curl must be installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, body);
    // The plain listener keeps serving plain HTTP beside it.
    let r = Client::connect(h.http())
        .post("/service/DirectProxy", &[], b"plain")
        .expect("plain");
    assert_eq!(r.body, b"plain");
    let _ = std::fs::remove_dir_all(&certs);
    echo.stop();
}

#[test]
fn validate_names_an_unreadable_tls_key() {
    let dir = temp_dir("badtls");
    make_cert(&dir);
    std::fs::write(dir.join("key.pem"), "not a key").expect("overwrite key");
    let (code, err) = validate_in(
        &dir,
        "listeners:\n  https:\n    bind: \"127.0.0.1:0\"\n    tls: { cert: cert.pem, key: key.pem }\nproxies:\n  P: { path: /p, in: [ { respond: {} } ] }\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains(":4: listeners.https.tls: cannot read a private key from"),
        "{err}"
    );
    assert!(err.contains("key.pem"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
