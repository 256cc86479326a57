//! The byte-mutating fuzz harness shared by the `tests/fuzz_*.rs` targets (each includes this
//! file with `#[path]`). Stable Rust, no `cargo fuzz`: proptest draws a seed file of
//! `fuzz/corpus/<target>/` and a list of mutations (bit flips, random bytes, deletions,
//! repeats, dictionary tokens, splices from other seeds), and shrinks a failing list to a
//! short one.
//!
//! A run lasts `BUSBAR_FUZZ_SECONDS` (60 by default) and starts from `BUSBAR_FUZZ_SEED` (the
//! clock by default); both are printed, so a failure reruns exactly. Every seed file is first
//! checked unmutated, so a file added to the corpus is a regression test. A failing input is
//! written to `<target dir>/tmp/fuzz-failures/` and named in the panic; a case that runs longer
//! than the target's `case_timeout` is a hang: its input is written the same way and the
//! process exits. A crash that ends the process (a stack overflow) leaves its input in
//! `<name>-last` there.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

/// Default run length of one target, in seconds.
pub const DEFAULT_SECONDS: f64 = 60.0;

/// Cases per proptest run; runs are repeated with fresh seeds until the time is up.
const BATCH: u32 = 64;

/// One fuzz target.
pub struct Target {
    /// Names the corpus directory `fuzz/corpus/<name>/` and the failure files.
    pub name: &'static str,
    /// Seeds made at run time (signed messages, say), added to the corpus files.
    pub extra_seeds: Vec<Vec<u8>>,
    /// Tokens a mutation may insert: the syntax of the format under test.
    pub dictionary: &'static [&'static [u8]],
    /// Inputs are cut to this length after each mutation.
    pub max_len: usize,
    /// Longer than this for one case is a hang.
    pub case_timeout: Duration,
}

/// One mutation; positions are taken modulo the current length (plus one).
#[derive(Debug, Clone)]
pub enum Op {
    Flip {
        at: u32,
        bit: u8,
    },
    Set {
        at: u32,
        byte: u8,
    },
    Insert {
        at: u32,
        bytes: Vec<u8>,
    },
    Delete {
        at: u32,
        len: u32,
    },
    Repeat {
        at: u32,
        len: u32,
        times: u32,
    },
    Token {
        at: u32,
        token: u32,
    },
    Splice {
        at: u32,
        seed: u32,
        from: u32,
        len: u32,
    },
    Truncate {
        at: u32,
    },
}

/// A seed (index into the corpus) and the mutations applied to it.
#[derive(Debug, Clone)]
pub struct Case {
    pub seed: u32,
    pub ops: Vec<Op>,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u32>(), 0..8u8).prop_map(|(at, bit)| Op::Flip { at, bit }),
        2 => (any::<u32>(), any::<u8>()).prop_map(|(at, byte)| Op::Set { at, byte }),
        2 => (any::<u32>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Op::Insert { at, bytes }),
        2 => (any::<u32>(), 1..64u32).prop_map(|(at, len)| Op::Delete { at, len }),
        1 => (any::<u32>(), 1..64u32, 2..3000u32)
            .prop_map(|(at, len, times)| Op::Repeat { at, len, times }),
        4 => (any::<u32>(), any::<u32>()).prop_map(|(at, token)| Op::Token { at, token }),
        1 => (any::<u32>(), any::<u32>(), any::<u32>(), 1..512u32)
            .prop_map(|(at, seed, from, len)| Op::Splice { at, seed, from, len }),
        1 => any::<u32>().prop_map(|at| Op::Truncate { at }),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (any::<u32>(), prop::collection::vec(op(), 0..10)).prop_map(|(seed, ops)| Case { seed, ops })
}

fn pos(at: u32, len: usize) -> usize {
    at as usize % (len + 1)
}

fn insert(b: &mut Vec<u8>, at: usize, bytes: &[u8]) {
    let tail = b.split_off(at);
    b.extend_from_slice(bytes);
    b.extend_from_slice(&tail);
}

/// The input a case stands for.
pub fn mutate(case: &Case, seeds: &[Vec<u8>], dictionary: &[&[u8]], max_len: usize) -> Vec<u8> {
    let mut b = seeds[case.seed as usize % seeds.len()].clone();
    for op in &case.ops {
        match op {
            Op::Flip { at, bit } => {
                if !b.is_empty() {
                    let i = *at as usize % b.len();
                    b[i] ^= 1 << bit;
                }
            }
            Op::Set { at, byte } => {
                if !b.is_empty() {
                    let i = *at as usize % b.len();
                    b[i] = *byte;
                }
            }
            Op::Insert { at, bytes } => {
                let i = pos(*at, b.len());
                insert(&mut b, i, bytes);
            }
            Op::Delete { at, len } => {
                let i = pos(*at, b.len());
                let end = (i + *len as usize).min(b.len());
                b.copy_within(end.., i);
                b.truncate(b.len() - (end - i));
            }
            Op::Repeat { at, len, times } => {
                let i = pos(*at, b.len());
                let end = (i + *len as usize).min(b.len());
                let piece = b[i..end].to_vec();
                let extra = piece.len() * (*times as usize - 1);
                if !piece.is_empty() && b.len() + extra <= max_len {
                    let copies: Vec<u8> = piece.iter().copied().cycle().take(extra).collect();
                    insert(&mut b, end, &copies);
                }
            }
            Op::Token { at, token } => {
                if !dictionary.is_empty() {
                    let i = pos(*at, b.len());
                    let t = dictionary[*token as usize % dictionary.len()];
                    insert(&mut b, i, t);
                }
            }
            Op::Splice {
                at,
                seed,
                from,
                len,
            } => {
                let other = &seeds[*seed as usize % seeds.len()];
                let f = pos(*from, other.len());
                let end = (f + *len as usize).min(other.len());
                let i = pos(*at, b.len());
                insert(&mut b, i, &other[f..end]);
            }
            Op::Truncate { at } => {
                let i = pos(*at, b.len());
                b.truncate(i);
            }
        }
        b.truncate(max_len);
    }
    b
}

/// The seed files of `fuzz/corpus/<name>/`, in file-name order.
pub fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn env_seconds() -> f64 {
    std::env::var("BUSBAR_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s >= 0.0)
        .unwrap_or(DEFAULT_SECONDS)
}

fn env_seed() -> u64 {
    std::env::var("BUSBAR_FUZZ_SEED")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// 32 seed bytes for run `batch` of a fuzz run seeded with `seed` (splitmix64).
fn rng_seed(seed: u64, batch: u64) -> [u8; 32] {
    let mut x = seed ^ batch.wrapping_mul(0xA076_1D64_78BD_642F);
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes());
    }
    out
}

/// Writes a failing input where a developer finds it, and returns the path.
fn save_failure(name: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    // FNV-1a: a stable name, so the same failure is one file.
    let hash = input.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("{name}-{hash:016x}"));
    let _ = std::fs::write(&path, input);
    path
}

fn excerpt(input: &[u8]) -> String {
    let shown = &input[..input.len().min(600)];
    let more = if input.len() > shown.len() {
        " …"
    } else {
        ""
    };
    format!(
        "{:?}{more} ({} bytes)",
        String::from_utf8_lossy(shown),
        input.len()
    )
}

/// Runs `check` on every corpus file, then on mutated ones until the time is up. `check`
/// returns `Err(why)` when the property does not hold; a panic in it is a failure too. The
/// input being checked is kept in `<target dir>/tmp/fuzz-failures/<name>-last`, for crashes.
pub fn run(target: Target, check: impl Fn(&[u8]) -> Result<(), String>) {
    let files = corpus(target.name);
    assert!(!files.is_empty(), "fuzz/corpus/{} is empty", target.name);
    let seconds = env_seconds();
    let seed = env_seed();
    eprintln!(
        "fuzz {}: {} seed files, BUSBAR_FUZZ_SECONDS={seconds} BUSBAR_FUZZ_SEED={seed}",
        target.name,
        files.len()
    );

    // The watchdog: every case announces itself; silence longer than the timeout is a hang.
    let (tx, rx) = mpsc::channel::<Option<Vec<u8>>>();
    let name = target.name;
    let timeout = target.case_timeout;
    let watchdog = std::thread::spawn(move || {
        let mut current: Option<Vec<u8>> = None;
        loop {
            match rx.recv_timeout(timeout) {
                Ok(Some(input)) => current = Some(input),
                Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(input) = current.take() {
                        let path = save_failure(name, &input);
                        eprintln!(
                            "fuzz {name}: HANG, a case ran longer than {timeout:?} \
                             (BUSBAR_FUZZ_SEED={seed}); input saved to {}: {}",
                            path.display(),
                            excerpt(&input)
                        );
                        std::process::exit(101);
                    }
                }
            }
        }
    });
    // Stops the watchdog however this function ends, a panic included.
    struct Stop(mpsc::Sender<Option<Vec<u8>>>);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.send(None);
        }
    }
    let stop = Stop(tx);
    // A crash (a stack overflow, a fault in C) ends the process before anything can be
    // reported: the input being checked is always in this file.
    let last = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fuzz-failures")
        .join(format!("{name}-last"));
    let _ = std::fs::create_dir_all(last.parent().unwrap());
    let checked = |input: &[u8]| {
        let _ = stop.0.send(Some(input.to_vec()));
        let _ = std::fs::write(&last, input);
        check(input)
    };

    for (path, bytes) in &files {
        if let Err(why) = checked(bytes) {
            panic!("fuzz {name}: corpus file {} fails: {why}", path.display());
        }
    }
    let mut seeds: Vec<Vec<u8>> = files.into_iter().map(|(_, b)| b).collect();
    seeds.extend(target.extra_seeds.iter().cloned());
    for s in &target.extra_seeds {
        if let Err(why) = checked(s) {
            panic!("fuzz {name}: built-in seed fails: {why}: {}", excerpt(s));
        }
    }

    let cases = AtomicU64::new(0);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut batch = 0u64;
    while start.elapsed() < budget {
        let config = Config {
            cases: BATCH,
            failure_persistence: None,
            max_shrink_iters: 4096,
            max_shrink_time: 120_000,
            ..Config::default()
        };
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &rng_seed(seed, batch));
        let mut runner = TestRunner::new_with_rng(config, rng);
        let result = runner.run(&case(), |c| {
            cases.fetch_add(1, Ordering::Relaxed);
            let input = mutate(&c, &seeds, target.dictionary, target.max_len);
            checked(&input).map_err(TestCaseError::fail)
        });
        match result {
            Ok(()) => {}
            Err(TestError::Fail(why, c)) => {
                let input = mutate(&c, &seeds, target.dictionary, target.max_len);
                let path = save_failure(name, &input);
                panic!(
                    "fuzz {name}: {why}\nrerun with BUSBAR_FUZZ_SEED={seed}; \
                     input saved to {} (copy it to fuzz/corpus/{name}/ once fixed): {}",
                    path.display(),
                    excerpt(&input)
                );
            }
            Err(TestError::Abort(why)) => panic!("fuzz {name}: aborted: {why}"),
        }
        batch += 1;
    }
    drop(stop);
    let _ = watchdog.join();
    eprintln!(
        "fuzz {name}: {} mutated cases in {:.1}s, no failure",
        cases.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
}
