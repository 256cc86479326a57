//! Test support: engines and back ends on ports from the OS, and a small blocking HTTP/1.1
//! client that shows exactly what went over the wire.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use busbar_engine::echo::{EchoOptions, EchoServer};
use busbar_engine::{Engine, RunningEngine};

pub struct Harness {
    pub engine: Option<RunningEngine>,
    pub dir: PathBuf,
    pub config: PathBuf,
}

impl Harness {
    pub fn http(&self) -> SocketAddr {
        self.engine().listeners["http"]
    }
    pub fn admin(&self) -> SocketAddr {
        self.engine().admin.expect("admin")
    }
    pub fn engine(&self) -> &RunningEngine {
        self.engine.as_ref().expect("engine running")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(e) = self.engine.take() {
            e.shutdown();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The repository's `examples/` folder.
pub fn examples_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "busbar-e2e-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Starts an engine with `yaml` (listener `http` and admin on port 0 are added).
pub fn engine(yaml: &str) -> Harness {
    let dir = temp_dir("engine");
    let config = dir.join("busbar.yaml");
    let full = format!(
        "workers: 2\nlog: {{ level: warn }}\nadmin: {{ bind: \"127.0.0.1:0\" }}\nshutdown: {{ drain_timeout: 5s }}\nlisteners:\n  http: {{ bind: \"127.0.0.1:0\" }}\n{yaml}"
    );
    std::fs::write(&config, full).expect("write config");
    let engine = Engine::start(&config).unwrap_or_else(|e| panic!("engine start: {e}"));
    Harness {
        engine: Some(engine),
        dir,
        config,
    }
}

pub fn echo(opts: EchoOptions) -> EchoServer {
    busbar_engine::echo::start("127.0.0.1:0".parse().expect("addr"), opts, 1).expect("echo")
}

/// The YAML of an endpoint `echo` pointing at `addr`, and a DirectProxy using it.
pub fn direct_proxy_yaml(addr: SocketAddr, timeout: &str) -> String {
    format!(
        "endpoints:\n  echo: {{ url: \"http://{addr}/service/EchoService\", timeout: {timeout}, connect_timeout: 1s }}\nproxies:\n  DirectProxy:\n    path: /service/DirectProxy\n    in:\n      - call: echo\n"
    )
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub struct Client {
    pub stream: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        s.set_nodelay(true).expect("nodelay");
        Client {
            stream: BufReader::new(s),
        }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).expect("write");
    }

    /// POSTs `body` with Content-Length on this (kept-alive) connection.
    pub fn post(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Resp> {
        let mut head = format!(
            "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        self.exchange(out)
    }

    /// POSTs `body` with chunked transfer encoding, in chunks of `chunk` bytes.
    pub fn post_chunked(&mut self, path: &str, body: &[u8], chunk: usize) -> std::io::Result<Resp> {
        let mut out = format!("POST {path} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\nContent-Type: text/xml\r\n\r\n").into_bytes();
        for c in body.chunks(chunk.max(1)) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
        self.exchange(out)
    }

    /// Sends `request` from another thread while this one reads the response, as real
    /// clients do: an echo path streams the answer back while the request is still going out.
    fn exchange(&mut self, request: Vec<u8>) -> std::io::Result<Resp> {
        let mut writer = self.stream.get_ref().try_clone()?;
        let sending = std::thread::spawn(move || writer.write_all(&request));
        let resp = self.read_response();
        let sent = sending
            .join()
            .map_err(|_| std::io::Error::other("writer panicked"))?;
        let resp = resp?;
        match sent {
            // A server may answer (a fault, say) before reading the whole upload and close:
            // the answer is what counts.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                Ok(resp)
            }
            other => other.map(|()| resp),
        }
    }

    /// Any request, with Content-Length when there is a body.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Resp> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\n");
        if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        self.exchange(out)
    }

    pub fn get(&mut self, path: &str) -> std::io::Result<Resp> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
        self.stream.get_mut().write_all(req.as_bytes())?;
        self.read_response()
    }

    /// Reads one response; bodies delimited by Content-Length, chunked, or connection close.
    pub fn read_response(&mut self) -> std::io::Result<Resp> {
        loop {
            let resp = self.read_one()?;
            if resp.status != 100 {
                return Ok(resp);
            }
        }
    }

    fn read_one(&mut self) -> std::io::Result<Resp> {
        let mut line = String::new();
        if self.stream.read_line(&mut line)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a response",
            ));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            self.stream.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let mut resp = Resp {
            status,
            headers,
            body: Vec::new(),
        };
        if status == 100 || status == 204 || status == 304 {
            return Ok(resp);
        }
        if let Some(len) = resp.header("content-length") {
            let len: usize = len.parse().map_err(std::io::Error::other)?;
            let mut body = vec![0; len];
            self.stream.read_exact(&mut body)?;
            resp.body = body;
        } else if resp
            .header("transfer-encoding")
            .is_some_and(|t| t.contains("chunked"))
        {
            loop {
                let mut size = String::new();
                self.stream.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim(), 16).map_err(std::io::Error::other)?;
                if n == 0 {
                    let mut end = String::new();
                    self.stream.read_line(&mut end)?;
                    break;
                }
                let start = resp.body.len();
                resp.body.resize(start + n, 0);
                self.stream.read_exact(&mut resp.body[start..])?;
                let mut crlf = [0; 2];
                self.stream.read_exact(&mut crlf)?;
            }
        } else {
            self.stream.read_to_end(&mut resp.body)?;
        }
        Ok(resp)
    }
}

/// Deterministic pseudo-random bytes (xorshift), printable so failures are readable.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b'!' + (x % 94) as u8
        })
        .collect()
}

pub fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b).into()
}

/// Polls `f` until it returns true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

pub fn metric(admin: SocketAddr, line_prefix: &str) -> Option<f64> {
    let r = Client::connect(admin).get("/metrics").ok()?;
    r.text()
        .lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs `busbar validate` on the config file at `path` with `envs` set.
fn validate_file<K, V>(
    path: &std::path::Path,
    envs: impl IntoIterator<Item = (K, V)>,
) -> std::process::Output
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("validate")
        .arg(path)
        .envs(envs)
        .output()
        .expect("run busbar validate")
}

/// Runs `busbar validate` on the config file at `path` with `envs` set, and fails the test,
/// naming the file and what `validate` said, unless it passes.
pub fn assert_validates<K, V>(path: &std::path::Path, envs: impl IntoIterator<Item = (K, V)>)
where
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    let out = validate_file(path, envs);
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes `yaml` as `c.yaml` in `dir` and runs `busbar validate` on it.
fn run_validate(dir: &std::path::Path, yaml: &str) -> std::process::Output {
    let file = dir.join("c.yaml");
    std::fs::write(&file, yaml).expect("write config");
    validate_file(&file, std::iter::empty::<(&str, &str)>())
}

/// `busbar validate` on `yaml` written in `dir`: (exit code, stderr).
pub fn validate_in(dir: &std::path::Path, yaml: &str) -> (Option<i32>, String) {
    let out = run_validate(dir, yaml);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Asserts that some line of `err` holds both parts of each pair: where (`:12: key:`) and what.
pub fn assert_each_line(err: &str, expected: &[(&str, &str)]) {
    for (line, what) in expected {
        assert!(
            err.lines().any(|l| l.contains(line) && l.contains(what)),
            "{line} {what}:\n{err}"
        );
    }
}

/// `busbar validate` on `yaml` written in `dir`: (success, stdout).
pub fn validate_stdout(dir: &std::path::Path, yaml: &str) -> (bool, String) {
    let out = run_validate(dir, yaml);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A back end that records each request body and echoes it.
pub fn recording_back_end() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    let up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (addr, seen) = switchable_back_end(up);
    (addr, seen)
}

/// [`recording_back_end`] while `up` holds; otherwise it answers 503 and records nothing.
pub fn switchable_back_end(
    up: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = seen.clone();
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            let (store, up) = (store.clone(), up.clone());
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let (status, body) = if up.load(std::sync::atomic::Ordering::SeqCst) {
                        // Recorded before answering, so the test sees it once it has the answer.
                        store.lock().expect("lock").push(body.clone());
                        ("200 OK", body)
                    } else {
                        ("503 Service Unavailable", b"down".to_vec())
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: text/xml; charset=UTF-8\r\nContent-Length: {}\r\n\r\n",
                        body.len()
                    );
                    let s = r.get_mut();
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.write_all(&body);
                }
            });
        }
    });
    (addr, seen)
}

/// A back end that answers each request with the values of the request headers `names`
/// (lower case) it received, joined with `|` (`-` for a missing one): what a back end saw of
/// trace headers, say.
pub fn header_back_end(names: &'static [&'static str]) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in l.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream);
                loop {
                    let mut seen = vec!["-".to_owned(); names.len()];
                    let mut len = 0usize;
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap_or((h, ""));
                        let k = k.to_ascii_lowercase();
                        if k == "content-length" {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        if let Some(i) = names.iter().position(|n| *n == k) {
                            seen[i] = v.trim().to_owned();
                        }
                    }
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let text = seen.join("|");
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
                        text.len()
                    );
                    let s = r.get_mut();
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.write_all(text.as_bytes());
                }
            });
        }
    });
    addr
}

/// WS-Security test keys (CA, client, server, rogue, expired, untrusted), generated once per
/// test run with openssl by tests/interop/keys.sh.
pub fn test_keys() -> PathBuf {
    static KEYS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wsse-keys");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/interop/keys.sh");
        let status = std::process::Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .status()
            .expect("run tests/interop/keys.sh (needs bash and openssl: scripts/setup.sh)");
        assert!(status.success(), "tests/interop/keys.sh failed");
        dir
    })
    .clone()
}

/// A `busbar run` child process of an example config, killed on drop.
pub struct Example {
    child: std::process::Child,
    /// The address of every `${BUSBAR_…:-host:port}` variable of the file, on a free port.
    pub addrs: std::collections::BTreeMap<String, SocketAddr>,
    /// Where its standard error (the log) goes.
    log: PathBuf,
}

impl Example {
    /// Runs `examples/<name>` with every address variable of the file (`${BUSBAR_X:-host:port}`)
    /// on a free loopback port, one worker, and `env` added; returns once the listener at
    /// `BUSBAR_LISTEN` accepts connections. An `env` value `@VAR` is the address chosen for
    /// VAR (for a variable that must name the same address as another).
    pub fn start(name: &str, env: &[(&str, &str)]) -> Example {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(name);
        let text = std::fs::read_to_string(&path).expect("example");
        let mut last_err = String::new();
        // A port found free can be taken by a parallel test before the example binds it: the
        // example then refuses to start, and it is tried again on other ports.
        for _attempt in 0..3 {
            let mut addrs = std::collections::BTreeMap::new();
            for (at, _) in text.match_indices("${BUSBAR_") {
                let rest = &text[at + 2..];
                let Some(end) = rest.find('}') else { continue };
                let Some((var, default)) = rest[..end].split_once(":-") else {
                    continue;
                };
                if default.parse::<SocketAddr>().is_ok() && !addrs.contains_key(var) {
                    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
                    addrs.insert(var.to_owned(), l.local_addr().expect("addr"));
                }
            }
            let listen = *addrs
                .get("BUSBAR_LISTEN")
                .expect("BUSBAR_LISTEN in the example");
            let log = temp_dir("example").join("stderr.log");
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
                .arg("run")
                .arg(&path)
                .envs(addrs.iter().map(|(k, v)| (k.clone(), v.to_string())))
                .env("BUSBAR_WORKERS", "1")
                .env("BUSBAR_LOG", "warn")
                .envs(env.iter().map(|(k, v)| {
                    // `@VAR` stands for the address chosen for VAR.
                    match v.strip_prefix('@').and_then(|var| addrs.get(var)) {
                        Some(a) => (k.to_string(), a.to_string()),
                        None => (k.to_string(), v.to_string()),
                    }
                }))
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log"))
                .spawn()
                .expect("busbar run");
            if eventually(Duration::from_secs(20), || {
                TcpStream::connect(listen).is_ok()
            }) {
                return Example { child, addrs, log };
            }
            let _ = child.kill();
            let _ = child.wait();
            last_err = std::fs::read_to_string(&log).unwrap_or_default();
        }
        panic!("{name} did not start listening:\n{last_err}");
    }

    /// The address of the proxies' listener.
    pub fn listen(&self) -> SocketAddr {
        self.addrs["BUSBAR_LISTEN"]
    }

    /// Its log so far (at `warn` unless `env` sets `BUSBAR_LOG`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `busbar bench` run as a user would, its output on both streams.
pub fn bench(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_busbar"))
        .arg("bench")
        .args(args)
        .output()
        .expect("busbar bench");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status, text)
}

/// Runs the `openssl` command with `args` in `dir`, for certificates made at test time.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl must be installed (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}
