//! The peers: Wss4jTool (Apache WSS4J 3.0.4; many jobs in one JVM with `batch`) and
//! python-xmlsec, both installed under `target/interop/` by `tests/interop/setup.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::support::test_keys;

/// What to do when a peer is missing. CI runs scripts/setup.sh before `cargo test`, so a
/// missing peer is an error, never a reason to skip.
pub const SETUP: &str = "run scripts/setup.sh (tests/interop/setup.sh)";

/// The repository's root directory.
pub fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The peers' programs and the test keys (tests/interop/keys.sh).
pub struct Peers {
    pub wss4j: PathBuf,
    pub python: PathBuf,
    pub xmlsec: PathBuf,
    pub keys: PathBuf,
}

/// Finds the peers; panics, naming the setup script, when one is missing or broken.
pub fn peers() -> &'static Peers {
    static PEERS: OnceLock<Peers> = OnceLock::new();
    PEERS.get_or_init(|| {
        let root = root();
        let interop = root.join("target/interop");
        let wss4j = interop.join("wss4j/wss4j-tool");
        let python = interop.join("venv/bin/python");
        let xmlsec = root.join("tests/interop/xmlsec_verify.py");
        for (what, path) in [
            ("the WSS4J tool", &wss4j),
            (
                "the WSS4J tool's jar",
                &interop.join("wss4j/wss4j-tool.jar"),
            ),
            ("the python-xmlsec venv", &python),
        ] {
            assert!(
                path.is_file(),
                "{what} is missing ({}): {SETUP}",
                path.display()
            );
        }
        let java = Command::new("java")
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            java.is_ok_and(|s| s.success()),
            "java does not run (the WSS4J tool needs Java 17): {SETUP}"
        );
        let imports = Command::new(&python)
            .args(["-c", "import xmlsec, lxml, cryptography"])
            .output()
            .unwrap_or_else(|e| panic!("{} does not run ({e}): {SETUP}", python.display()));
        assert!(
            imports.status.success(),
            "python-xmlsec does not import ({}): {SETUP}",
            String::from_utf8_lossy(&imports.stderr).trim()
        );
        Peers {
            wss4j,
            python,
            xmlsec,
            keys: test_keys(),
        }
    })
}

/// A fresh work directory for one test, kept afterwards for inspection.
pub fn work_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("interop")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// One word of a batch line: quoted when it must be (Wss4jTool splits like a shell: blanks
/// separate, '…' and "…" quote, a backslash escapes outside single quotes).
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '\'' | '"' | '\\' | '#'));
    if plain {
        word.to_owned()
    } else if !word.contains('\'') {
        format!("'{word}'")
    } else {
        let mut out = String::from("\"");
        for c in word.chars() {
            if matches!(c, '"' | '\\') {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

/// How one batch job ended.
#[derive(Debug, Clone)]
pub struct JobResult {
    pub ok: bool,
    /// Wss4jTool's summary (`signer=… sig=…`) or its reason for failing.
    pub detail: String,
}

/// WSS4J jobs run together in one JVM (its start-up costs more than a dozen jobs).
pub struct Batch {
    dir: PathBuf,
    lines: Vec<String>,
}

impl Batch {
    pub fn new(dir: &Path) -> Batch {
        Batch {
            dir: dir.to_path_buf(),
            lines: Vec::new(),
        }
    }

    /// Adds `secure` or `verify` with `args` (`--keys` is added); returns the job's index.
    pub fn add(&mut self, command: &str, args: &[&str]) -> usize {
        let keys = peers().keys.display().to_string();
        let mut words = vec![command, "--keys", &keys];
        words.extend_from_slice(args);
        let line: Vec<String> = words.iter().map(|w| quote(w)).collect();
        self.lines.push(line.join(" "));
        self.lines.len() - 1
    }

    /// Runs every job; the results are in the order the jobs were added.
    pub fn run(self, name: &str) -> Vec<JobResult> {
        if self.lines.is_empty() {
            return Vec::new();
        }
        let file = self.dir.join(format!("{name}.jobs"));
        std::fs::write(&file, self.lines.join("\n") + "\n").expect("write jobs");
        let out = Command::new(&peers().wss4j)
            .arg("batch")
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}: {SETUP}", peers().wss4j.display()));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        std::fs::write(self.dir.join(format!("{name}.out")), &stdout).expect("write");
        std::fs::write(self.dir.join(format!("{name}.err")), &stderr).expect("write");
        // 0: every job succeeded, 1: some failed; anything else is the tool itself failing.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "wss4j-tool batch {} exited with {}: {stderr}\n({SETUP})",
            file.display(),
            out.status
        );
        let mut results = vec![
            JobResult {
                ok: false,
                detail: format!("no status line from wss4j-tool; stderr: {stderr}"),
            };
            self.lines.len()
        ];
        for line in stdout.lines() {
            let mut words = line.splitn(3, ' ');
            let (Some(n), Some(status)) = (words.next(), words.next()) else {
                continue;
            };
            let Some(i) = n.parse::<usize>().ok().and_then(|n| n.checked_sub(1)) else {
                continue;
            };
            if let Some(r) = results.get_mut(i) {
                *r = JobResult {
                    ok: status == "ok",
                    detail: words.next().unwrap_or("").to_owned(),
                };
            }
        }
        results
    }
}

/// Runs `xmlsec_verify.py MODE --keys KEYS ARGS...`.
pub fn xmlsec(mode: &str, args: &[&str]) -> Output {
    let p = peers();
    Command::new(&p.python)
        .arg(&p.xmlsec)
        .arg(mode)
        .arg("--keys")
        .arg(&p.keys)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}: {SETUP}", p.python.display()))
}

/// Runs `f` on every item on its own thread (the peers are separate processes: starting
/// them side by side hides their start-up); results in the items' order.
pub fn in_parallel<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = items.iter().map(|i| s.spawn(|| f(i))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("peer thread"))
            .collect()
    })
}

#[test]
fn batch_words_are_quoted_the_way_wss4j_tool_splits_them() {
    assert_eq!(quote("--profile"), "--profile");
    assert_eq!(quote("Timestamp Signature"), "'Timestamp Signature'");
    assert_eq!(quote("{Element}{}Body"), "{Element}{}Body");
    assert_eq!(quote("it's \"x\""), "\"it's \\\"x\\\"\"");
    assert_eq!(quote(""), "''");
}
