//! Test keys and certificates, generated once per test binary with the `openssl` CLI into
//! cargo's per-target scratch directory. Nothing secret is committed.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub const P12_PASSWORD: &str = "s3cret pass";
pub const CLIENT_SUBJECT: &str = "/C=US/O=Example/CN=client";
pub const CLIENT_SERIAL: &str = "123456789012345678901234567890";
pub const CA_SUBJECT: &str = "/C=US/O=Example/CN=Example CA";

/// Where the generated files are; see [`fixture`] for what there is.
pub struct Fixture {
    pub dir: PathBuf,
}

impl Fixture {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
[dn]
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[v3_leaf]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ca]
default_ca = ca_default
[ca_default]
dir = .
database = ./index.txt
new_certs_dir = ./issued
serial = ./serial.txt
default_md = sha256
policy = any_policy
unique_subject = no
copy_extensions = none
x509_extensions = v3_leaf
[any_policy]
countryName = optional
organizationName = optional
commonName = supplied
";

/// The generated files, once per test binary:
///
/// - `ca.key`/`ca.pem`: root CA "C=US, O=Example, CN=Example CA"
/// - `client.key`/`client.pem`: RSA-2048 leaf signed by the CA, with SKI, serial
///   [`CLIENT_SERIAL`]; `client.pub.pem` its public key
/// - `server.key`/`server.pem`/`server.p12` (password [`P12_PASSWORD`], OpenSSL 3 defaults,
///   chain includes the CA), `server-legacy.p12` (RC2/3DES, SHA-1 MAC),
///   `server-pkcs1.key` (PKCS#1 "RSA PRIVATE KEY"), `server.pub.pem`
/// - `noski.pem`: v1 leaf for the client key without extensions
/// - `rogue.key`/`rogue.pem`: self-signed with the client's exact subject
/// - `rogue-ca.key`/`rogue-ca.pem`: self-signed with the CA's exact subject; `rogue-leaf.pem`
///   the client's subject, issued by the rogue CA
/// - `other-ca.pem`, `other-leaf.pem`: an unrelated CA and a leaf it issued
/// - `expired.pem`: leaf signed by the CA, valid only in January 2020
/// - `inter.key`/`inter.pem`: intermediate CA under the root; `deep.pem` a leaf under it
/// - `inter-short.pem`: intermediate CA valid one day; `deep-short.pem` a leaf under it
/// - `client-sha1.pem`: the client key certified with sha1WithRSAEncryption
/// - `sub-by-leaf.pem`: a certificate "issued" by the client leaf, which is no CA
/// - `big.key`/`big.pem`: RSA-3072, self-signed; `small.key`: RSA-1024; `ec.key`: P-256
pub fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(generate)
}

fn generate() -> Fixture {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "busbar-wssec-keys-{}-{}",
        module_path!().replace("::", "-"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("issued")).unwrap();
    std::fs::write(dir.join("openssl.cnf"), OPENSSL_CNF).unwrap();
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial.txt"), "1000\n").unwrap();
    let run = |args: &[&str]| openssl(&dir, args);

    for (name, bits) in [
        ("ca", "2048"),
        ("client", "2048"),
        ("server", "2048"),
        ("rogue", "2048"),
        ("rogue-ca", "2048"),
        ("other-ca", "2048"),
        ("other-leaf", "2048"),
        ("expired", "2048"),
        ("inter", "2048"),
        ("deep", "2048"),
        ("sub", "2048"),
        ("big", "3072"),
        ("small", "1024"),
    ] {
        let bits_opt = format!("rsa_keygen_bits:{bits}");
        let out = format!("{name}.key");
        run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            &bits_opt,
            "-out",
            &out,
        ]);
    }
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "ec.key",
    ]);

    self_signed(&dir, "ca", CA_SUBJECT, "v3_ca");
    self_signed(&dir, "rogue", CLIENT_SUBJECT, "v3_leaf");
    self_signed(&dir, "rogue-ca", CA_SUBJECT, "v3_ca");
    self_signed(&dir, "other-ca", "/C=US/O=Other/CN=Other CA", "v3_ca");
    self_signed(&dir, "big", "/C=US/O=Example/CN=big", "v3_leaf");

    issue(
        &dir,
        "client",
        "client",
        CLIENT_SUBJECT,
        "ca",
        "v3_leaf",
        Some(CLIENT_SERIAL),
    );
    issue(
        &dir,
        "server",
        "server",
        "/C=US/O=Example/CN=server",
        "ca",
        "v3_leaf",
        None,
    );
    issue(
        &dir,
        "rogue-leaf",
        "rogue",
        CLIENT_SUBJECT,
        "rogue-ca",
        "v3_leaf",
        None,
    );
    issue(
        &dir,
        "other-leaf",
        "other-leaf",
        "/CN=other leaf",
        "other-ca",
        "v3_leaf",
        None,
    );
    issue(
        &dir,
        "inter",
        "inter",
        "/C=US/O=Example/CN=Example Intermediate",
        "ca",
        "v3_ca",
        None,
    );
    issue(
        &dir,
        "deep",
        "deep",
        "/C=US/O=Example/CN=deep client",
        "inter",
        "v3_leaf",
        None,
    );
    issue(
        &dir,
        "sub-by-leaf",
        "sub",
        "/C=US/O=Example/CN=sub",
        "client",
        "v3_leaf",
        None,
    );
    let short = "/C=US/O=Example/CN=Short-lived Intermediate";
    issue_with(
        &dir,
        "inter-short",
        "inter",
        short,
        "ca",
        "v3_ca",
        None,
        "-sha256",
        "1",
    );
    std::fs::copy(dir.join("inter.key"), dir.join("inter-short.key")).unwrap();
    let subject = "/C=US/O=Example/CN=short chain client";
    issue(
        &dir,
        "deep-short",
        "deep",
        subject,
        "inter-short",
        "v3_leaf",
        None,
    );
    let subject = "/C=US/O=Example/CN=sha1 client";
    issue_with(
        &dir,
        "client-sha1",
        "client",
        subject,
        "ca",
        "v3_leaf",
        None,
        "-sha1",
        "365",
    );

    // A v1 certificate without extensions, so without a subjectKeyIdentifier.
    run(&[
        "req",
        "-new",
        "-key",
        "client.key",
        "-subj",
        "/CN=noski",
        "-out",
        "noski.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "noski.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-days",
        "30",
        "-out",
        "noski.pem",
    ]);

    // `openssl x509` in OpenSSL 3.0 cannot backdate, `openssl ca` can.
    run(&[
        "req",
        "-new",
        "-config",
        "openssl.cnf",
        "-key",
        "expired.key",
        "-subj",
        "/C=US/O=Example/CN=expired client",
        "-out",
        "expired.csr",
    ]);
    run(&[
        "ca",
        "-batch",
        "-config",
        "openssl.cnf",
        "-cert",
        "ca.pem",
        "-keyfile",
        "ca.key",
        "-in",
        "expired.csr",
        "-out",
        "expired.pem",
        "-startdate",
        "20200101000000Z",
        "-enddate",
        "20200201000000Z",
        "-notext",
    ]);

    let pass = format!("pass:{P12_PASSWORD}");
    run(&[
        "pkcs12",
        "-export",
        "-inkey",
        "server.key",
        "-in",
        "server.pem",
        "-certfile",
        "ca.pem",
        "-passout",
        &pass,
        "-out",
        "server.p12",
    ]);
    run(&[
        "pkcs12",
        "-export",
        "-legacy",
        "-inkey",
        "server.key",
        "-in",
        "server.pem",
        "-passout",
        &pass,
        "-out",
        "server-legacy.p12",
    ]);
    run(&[
        "rsa",
        "-in",
        "server.key",
        "-traditional",
        "-out",
        "server-pkcs1.key",
    ]);
    for name in ["client", "server"] {
        let key = format!("{name}.key");
        let out = format!("{name}.pub.pem");
        run(&["pkey", "-in", &key, "-pubout", "-out", &out]);
    }
    Fixture { dir }
}

fn self_signed(dir: &Path, name: &str, subject: &str, ext: &str) {
    let key = format!("{name}.key");
    let out = format!("{name}.pem");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            &key,
            "-subj",
            subject,
            "-days",
            "3650",
            "-sha256",
            "-extensions",
            ext,
            "-out",
            &out,
        ],
    );
}

/// Issues `{name}.pem` for `{key_name}.key`, signed by `{issuer}` with SHA-256 for a year.
fn issue(
    dir: &Path,
    name: &str,
    key_name: &str,
    subject: &str,
    issuer: &str,
    ext: &str,
    serial: Option<&str>,
) {
    issue_with(
        dir, name, key_name, subject, issuer, ext, serial, "-sha256", "365",
    );
}

#[allow(clippy::too_many_arguments)]
fn issue_with(
    dir: &Path,
    name: &str,
    key_name: &str,
    subject: &str,
    issuer: &str,
    ext: &str,
    serial: Option<&str>,
    digest: &str,
    days: &str,
) {
    let key = format!("{key_name}.key");
    let csr = format!("{name}.csr");
    let out = format!("{name}.pem");
    let ca = format!("{issuer}.pem");
    let ca_key = format!("{issuer}.key");
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            &key,
            "-subj",
            subject,
            "-out",
            &csr,
        ],
    );
    let mut args = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-days",
        days,
        digest,
        "-extfile",
        "openssl.cnf",
        "-extensions",
        ext,
        "-out",
        &out,
    ];
    if let Some(serial) = serial {
        args.extend(["-set_serial", serial]);
    }
    openssl(dir, &args);
}

/// Runs `openssl` in `dir`, returning stdout; any failure, including a missing binary, fails the
/// test with what went wrong.
pub fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the `openssl` CLI ({e}); these tests need it to make keys and \
                 certificates and to cross-check results: install OpenSSL 3"
            )
        });
    assert!(
        output.status.success(),
        "openssl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Runs `openssl` and reports only whether it succeeded.
pub fn openssl_ok(dir: &Path, args: &[&str]) -> bool {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map(|o| o.status.success())
        .unwrap_or_else(|e| panic!("cannot run the `openssl` CLI ({e}); install OpenSSL 3"))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses openssl's "AB:CD:..." or plain hex output.
pub fn unhex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text
        .bytes()
        .filter(u8::is_ascii_hexdigit)
        .map(|c| (c as char).to_digit(16).unwrap() as u8)
        .collect();
    digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect()
}

/// A file name in the fixture directory that no other test uses.
pub fn scratch(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    fixture().path(&format!("scratch-{n}-{name}"))
}

/// The byte range of every `CipherValue` element's text, in document order (in a message
/// the secure step made: its EncryptedKey's, then its EncryptedData's).
pub fn cipher_values(message: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = message[from..].find("CipherValue>") {
        let open_end = from + i + "CipherValue>".len();
        let close = open_end + message[open_end..].find("</").unwrap();
        out.push(open_end..close);
        from = message[close..].find('>').unwrap() + close;
    }
    out
}
