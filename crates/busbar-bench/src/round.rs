//! `bench round`: a whole benchmark round from one file. The kit starts the shared back end,
//! then for each round and each ESB under test starts the ESB, waits until it answers, warms
//! it up, measures its suites cell by cell with every answer verified, stops it and records its
//! start-up time and peak memory. Everything measured is written as soon as it is measured, so
//! a round stopped by Ctrl-C (or a target that fails to start) still leaves a complete,
//! readable result directory and report ([`crate::round_report`]).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

use crate::check::{Scenario, Suite};
use crate::client::{Url, Version};
use crate::error::BenchError;
use crate::integrator::{Shape, PRODUCTS};
use crate::load::{self, LoadPlan, LoadResult, Requests, StopRule};
use crate::matrix::{Cell, RunInfo, TargetInfo, CELL_SCHEMA, RUN_SCHEMA};
use crate::util::{parse_duration, parse_size, unix_now, Machine};

/// Schema tag of `round.json`.
pub const ROUND_SCHEMA: &str = "busbar-bench/round/v1";

/// Options of `bench round`.
#[derive(clap::Args, Debug, Clone)]
pub struct RoundArgs {
    /// The round file (YAML): the ESBs under test, how each is started, checked and stopped,
    /// the suites and the settings. `bench/rounds/` holds ready ones; docs/bench.md ("Rounds")
    /// describes every key.
    pub file: PathBuf,
    /// Output directory (created; it must not hold an earlier round).
    #[arg(long)]
    pub out: PathBuf,
    /// Only these targets of the file (names, comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Option<Vec<String>>,
    /// Replaces the file's number of rounds.
    #[arg(long, value_parser = crate::util::parse_count)]
    pub rounds: Option<usize>,
    /// Replaces the file's measured duration per cell.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Replaces the file's warm-up after each start (and every target's own).
    #[arg(long, value_parser = parse_duration)]
    pub warmup: Option<Duration>,
    /// Print the plan (targets, cells, estimated wall time) and exit without starting anything.
    #[arg(long)]
    pub dry_run: bool,
}

/// A duration written as `30s`, `500ms`, `2m`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Dur, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Seconds(f64),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Seconds(s) => s.to_string(),
        };
        parse_duration(&text)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0.as_secs_f64())
    }
}

/// A message size written as bytes or with a `k`/`m` suffix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Size(pub usize);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Size, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Bytes(u64),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Bytes(b) => b.to_string(),
        };
        parse_size(&text)
            .map(Size)
            .map_err(serde::de::Error::custom)
    }
}

fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}
fn three() -> usize {
    3
}
fn secs(n: u64) -> Dur {
    Dur(Duration::from_secs(n))
}

/// A round file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoundFile {
    /// Title of the report.
    pub title: String,
    /// Rounds: every target measured once per round, targets in file order.
    #[serde(default = "three")]
    pub rounds: usize,
    /// Measured time per cell.
    #[serde(default = "default_duration")]
    pub duration: Dur,
    /// Load after each start, before the first cell, spread over the target's cells (a JIT
    /// needs it); a target may give its own.
    #[serde(default = "default_warmup")]
    pub warmup: Dur,
    /// Discarded load at the start of every cell.
    #[serde(default = "default_cell_warmup")]
    pub cell_warmup: Dur,
    /// After each cell, wait until the ESB answers one request of that cell alone again, at most
    /// this long (`0s`: no wait): the requests a cell leaves unanswered are worked off before
    /// the next cell starts, so they do not count against it.
    #[serde(default = "default_settle")]
    pub settle: Dur,
    /// Reuse connections (the WSO2 rounds ran with keep-alive off).
    #[serde(default = "yes")]
    pub keep_alive: bool,
    /// Check every answer (`false`: any HTTP 200 is a success; answer sizes are still compared
    /// across rounds).
    #[serde(default = "yes")]
    pub verify: bool,
    /// Load generator threads.
    #[serde(default = "one")]
    pub threads: usize,
    /// Per-request timeout.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
    /// CPUs the kit's load generator runs on (`taskset` list, e.g. `"1"`).
    #[serde(default)]
    pub load_cpus: Option<String>,
    /// The back end every target calls, started first and stopped last.
    #[serde(default)]
    pub backend: Option<Process>,
    /// Suites by name (`classic`, `integrator`, `bpel` or `orchestration`).
    pub suites: BTreeMap<String, SuitePlan>,
    /// The ESBs under test.
    pub targets: Vec<Target>,
}

fn default_duration() -> Dur {
    secs(30)
}
fn default_warmup() -> Dur {
    secs(10)
}
fn default_cell_warmup() -> Dur {
    Dur(Duration::ZERO)
}
fn default_settle() -> Dur {
    secs(60)
}
fn default_timeout() -> Dur {
    secs(30)
}
fn default_ready_timeout() -> Dur {
    secs(120)
}
fn default_stop_timeout() -> Dur {
    secs(15)
}

/// What one suite measures.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuitePlan {
    /// Scenarios (default: the suite's, as `bench run` has them).
    #[serde(default)]
    pub scenarios: Option<Vec<String>>,
    /// Request sizes (default: the suite's).
    #[serde(default)]
    pub sizes: Option<Vec<Size>>,
    /// Concurrency levels.
    pub concurrency: Vec<usize>,
    /// WS-Security scenarios: the key folder (relative to the round file).
    #[serde(default)]
    pub keys: Option<PathBuf>,
    /// WS-Security scenarios: send one message over and over (the proxy's replay cache off).
    #[serde(default)]
    pub replay: bool,
    /// WS-Security scenarios: messages built before each cell (later ones as they are sent).
    #[serde(default = "default_pool")]
    pub pool: usize,
}

fn default_pool() -> usize {
    200
}

/// How a process is started, checked ready and stopped.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Process {
    /// Program and arguments; a first word `busbar` is this very binary.
    pub command: Vec<String>,
    /// Working directory, relative to the round file (default: its folder).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Environment added to the kit's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// CPUs it runs on (`taskset` list); default every CPU.
    #[serde(default)]
    pub cpus: Option<String>,
    /// `host:port` that accepts connections once it is ready.
    pub ready: String,
    /// Longest wait for readiness.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout: Dur,
    /// Longest wait after SIGTERM before SIGKILL.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout: Dur,
}

/// One ESB under test.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Name in reports and folder names (letters, digits, `.`, `_`, `-`).
    pub name: Spanned<String>,
    /// Version, as free text.
    #[serde(default)]
    pub version: Option<String>,
    /// Program and arguments; a first word `busbar` is this very binary.
    pub command: Vec<String>,
    /// Working directory, relative to the round file (default: its folder).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// Environment added to the kit's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// CPUs it runs on (`taskset` list); default every CPU.
    #[serde(default)]
    pub cpus: Option<String>,
    /// Longest wait until every suite's base URL answers.
    #[serde(default = "default_ready_timeout")]
    pub ready_timeout: Dur,
    /// Longest wait after SIGTERM before SIGKILL.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout: Dur,
    /// This target's warm-up after each start (default: the round's).
    #[serde(default)]
    pub warmup: Option<Dur>,
    /// How answers that must equal the request are compared: `bytes` (default) or `xml` (as
    /// XML, for an ESB that re-serialises every message; see docs/bench.md).
    #[serde(default)]
    pub compare: Compare,
    /// The suites it serves: base URL and, optionally, the scenarios it has.
    pub suites: BTreeMap<String, TargetSuite>,
}

/// How a target's echoed answers are compared with the request.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compare {
    /// Byte for byte.
    #[default]
    Bytes,
    /// As XML ([`crate::check::Check::SameXml`]).
    Xml,
}

/// Where a target serves a suite.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSuite {
    /// Base URL of the suite's scenarios.
    pub base: String,
    /// The scenarios this target has (default: all of the round's).
    #[serde(default)]
    pub scenarios: Option<Vec<String>>,
    /// Scenarios this target serves elsewhere than the base URL and the scenario's usual path:
    /// scenario → absolute URL or a path on the base's host (`/services/DirectProxy`).
    #[serde(default)]
    pub paths: BTreeMap<String, String>,
}

/// A round file checked and resolved: what will run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The file it came from.
    pub file: PathBuf,
    /// Its text.
    pub text: String,
    /// Title.
    pub title: String,
    /// Rounds.
    pub rounds: usize,
    /// Settings of every cell.
    pub duration: Duration,
    /// Warm-up after each start (default).
    pub warmup: Duration,
    /// Warm-up per cell.
    pub cell_warmup: Duration,
    /// Longest wait after a cell for the ESB to work off what it left.
    pub settle: Duration,
    /// Keep-alive.
    pub keep_alive: bool,
    /// Verify answers.
    pub verify: bool,
    /// Load threads.
    pub threads: usize,
    /// Request timeout.
    pub timeout: Duration,
    /// The kit's CPUs.
    pub load_cpus: Option<String>,
    /// The back end.
    pub backend: Option<ProcessPlan>,
    /// The targets.
    pub targets: Vec<TargetPlan>,
}

/// A process to start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ProcessPlan {
    /// Program and arguments as run (after `taskset`, with `busbar` resolved).
    pub argv: Vec<String>,
    /// Working directory.
    pub dir: PathBuf,
    /// Added environment.
    pub env: BTreeMap<String, String>,
    /// CPUs.
    pub cpus: Option<String>,
    /// Addresses that must accept connections (and answer HTTP, for targets).
    pub ready: Vec<String>,
    /// Readiness timeout, seconds.
    pub ready_timeout_s: f64,
    /// Stop timeout, seconds.
    pub stop_timeout_s: f64,
}

/// One suite of one target.
#[derive(Clone, Debug)]
pub struct SuiteRun {
    /// The suite.
    pub suite: Suite,
    /// Base URL.
    pub base: String,
    /// Scenarios, in suite order.
    pub scenarios: Vec<Scenario>,
    /// Sizes (0 alone for a scenario without a size axis).
    pub sizes: Vec<usize>,
    /// Concurrency levels.
    pub concurrency: Vec<usize>,
    /// WS-Security keys, replay and pool.
    pub keys: Option<PathBuf>,
    /// Replay one message.
    pub replay: bool,
    /// Messages built before a cell.
    pub pool: usize,
    /// Scenario URLs other than `Scenario::url(base)`.
    pub urls: BTreeMap<Scenario, String>,
    /// How echoed answers are compared.
    pub compare: Compare,
}

impl SuiteRun {
    /// The URL a scenario is measured at.
    pub fn url_of(&self, s: Scenario) -> String {
        self.urls
            .get(&s)
            .cloned()
            .unwrap_or_else(|| s.url(&self.base))
    }

    fn sizes_of(&self, s: Scenario) -> Vec<usize> {
        if s.sized() {
            self.sizes.clone()
        } else {
            vec![0]
        }
    }

    /// Cells of one round.
    pub fn cells(&self) -> usize {
        self.scenarios
            .iter()
            .map(|&s| self.sizes_of(s).len())
            .sum::<usize>()
            * self.concurrency.len()
    }
}

/// One target, resolved.
#[derive(Clone, Debug)]
pub struct TargetPlan {
    /// Name.
    pub name: String,
    /// Version.
    pub version: Option<String>,
    /// How it runs.
    pub process: ProcessPlan,
    /// Warm-up after each start.
    pub warmup: Duration,
    /// Its suites.
    pub suites: Vec<SuiteRun>,
}

impl TargetPlan {
    fn cells(&self) -> usize {
        self.suites.iter().map(SuiteRun::cells).sum()
    }
}

/// Reads and checks a round file: every problem names the file and, where the parser knows
/// it, the line.
pub fn load_plan(file: &Path, args: &RoundArgs) -> Result<Plan, BenchError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| BenchError::io(format!("cannot read {}", file.display()), e))?;
    let raw: RoundFile = serde_saphyr::from_str(&text).map_err(|e| {
        let full = e.to_string();
        let first = full.lines().next().unwrap_or("not a round file").trim();
        let msg = first.strip_prefix("error:").unwrap_or(first).trim();
        BenchError::Usage(format!("{}: {msg}", file.display()))
    })?;
    let folder = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    resolve(raw, file, &text, &folder, args)
}

fn suite_of(name: &str) -> Result<Suite, String> {
    match name {
        "orchestration" => Ok(Suite::Bpel),
        other => other.parse(),
    }
}

fn scenarios_of(suite: Suite, names: &Option<Vec<String>>) -> Result<Vec<Scenario>, String> {
    let list = match names {
        None => suite.scenarios().to_vec(),
        Some(names) => names
            .iter()
            .map(|n| n.parse::<Scenario>())
            .collect::<Result<Vec<_>, _>>()?,
    };
    suite.admit(&list)?;
    if let Some(s) = list.iter().find(|s| **s == Scenario::DbWrite) {
        return Err(format!(
            "{s} makes a fresh request for every send and reads every row back after the run: measure it with `bench load --verify db-write`"
        ));
    }
    Ok(list)
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!(
            "target name '{name}' must be letters, digits, '.', '_' or '-' (it names folders)"
        ));
    }
    Ok(())
}

fn check_cpus(list: &str) -> Result<(), String> {
    let ok = !list.is_empty()
        && list.split(',').all(|part| {
            let mut ends = part.splitn(2, '-');
            ends.all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "cpus '{list}' is not a CPU list such as \"0\", \"0,1\" or \"0-3\""
        ))
    }
}

fn argv_of(
    command: &[String],
    cpus: &Option<String>,
    every_cpu: &Option<String>,
) -> Result<Vec<String>, String> {
    let Some(program) = command.first() else {
        return Err("command is empty".into());
    };
    let mut argv = Vec::new();
    // A process without its own CPUs gets every CPU, not the load generator's.
    if let Some(cpus) = cpus.as_ref().or(every_cpu.as_ref()) {
        argv.extend(["taskset".to_string(), "-c".to_string(), cpus.clone()]);
    }
    if program == "busbar" {
        let me = std::env::current_exe()
            .map_err(|e| format!("cannot find the busbar binary itself: {e}"))?;
        argv.push(me.display().to_string());
    } else {
        argv.push(program.clone());
    }
    argv.extend(command[1..].iter().cloned());
    Ok(argv)
}

fn every_cpu() -> String {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("0-{}", n.saturating_sub(1))
}

fn host_port(url: &str) -> Result<String, String> {
    let u = Url::parse(url)?;
    Ok(if u.host.contains(':') {
        format!("[{}]:{}", u.host, u.port)
    } else {
        format!("{}:{}", u.host, u.port)
    })
}

fn resolve(
    raw: RoundFile,
    file: &Path,
    text: &str,
    folder: &Path,
    args: &RoundArgs,
) -> Result<Plan, BenchError> {
    let mut errors: Vec<String> = Vec::new();
    let f = file.display();
    let every = raw.load_cpus.as_ref().map(|_| every_cpu());
    if let Some(c) = &raw.load_cpus {
        if let Err(e) = check_cpus(c) {
            errors.push(format!("{f}: load_cpus: {e}"));
        }
    }
    let rounds = args.rounds.unwrap_or(raw.rounds);
    if rounds == 0 {
        errors.push(format!("{f}: rounds: must be at least 1"));
    }
    if raw.threads == 0 {
        errors.push(format!("{f}: threads: must be at least 1"));
    }
    let duration = args.duration.unwrap_or(raw.duration.0);
    if duration.is_zero() {
        errors.push(format!("{f}: duration: must be more than 0s"));
    }
    if raw.targets.is_empty() {
        errors.push(format!("{f}: targets: the round has no target"));
    }
    let mut suites = BTreeMap::new();
    for (name, plan) in &raw.suites {
        let suite = match suite_of(name) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{f}: suites.{name}: {e}"));
                continue;
            }
        };
        let scenarios = match scenarios_of(suite, &plan.scenarios) {
            Ok(s) => s,
            Err(e) => {
                errors.push(format!("{f}: suites.{name}.scenarios: {e}"));
                continue;
            }
        };
        if plan.concurrency.is_empty() || plan.concurrency.contains(&0) {
            errors.push(format!(
                "{f}: suites.{name}.concurrency: give one or more positive levels"
            ));
        }
        let secure = scenarios.iter().any(|s| s.secure_profile().is_some());
        if secure && plan.keys.is_none() {
            errors.push(format!(
                "{f}: suites.{name}.keys: the WS-Security scenarios need the key folder (`make keys` writes keys/)"
            ));
        }
        let sizes = match &plan.sizes {
            Some(s) => s.iter().map(|s| s.0).collect(),
            None => match suite {
                Suite::Classic => crate::matrix::CLASSIC_SIZES.to_vec(),
                Suite::Integrator => crate::matrix::INTEGRATOR_SIZES.to_vec(),
                Suite::Bpel => vec![0],
            },
        };
        if suites.values().any(|s: &SuiteRun| s.suite == suite) {
            errors.push(format!("{f}: suites.{name}: the same suite twice"));
        }
        suites.insert(
            name.clone(),
            SuiteRun {
                suite,
                base: String::new(),
                scenarios,
                sizes,
                concurrency: plan.concurrency.clone(),
                keys: plan.keys.as_ref().map(|k| folder.join(k)),
                replay: plan.replay,
                pool: plan.pool.max(1),
                urls: BTreeMap::new(),
                compare: Compare::Bytes,
            },
        );
    }
    let backend = match &raw.backend {
        None => None,
        Some(p) => {
            let mut bad = |what: &str, e: String| errors.push(format!("{f}: backend.{what}: {e}"));
            if let Some(c) = &p.cpus {
                if let Err(e) = check_cpus(c) {
                    bad("cpus", e);
                }
            }
            match argv_of(&p.command, &p.cpus, &every) {
                Ok(argv) => Some(ProcessPlan {
                    argv,
                    dir: p
                        .dir
                        .as_ref()
                        .map_or(folder.to_path_buf(), |d| folder.join(d)),
                    env: p.env.clone(),
                    cpus: p.cpus.clone(),
                    ready: vec![p.ready.clone()],
                    ready_timeout_s: p.ready_timeout.0.as_secs_f64(),
                    stop_timeout_s: p.stop_timeout.0.as_secs_f64(),
                }),
                Err(e) => {
                    bad("command", e);
                    None
                }
            }
        }
    };
    let mut targets = Vec::new();
    for t in &raw.targets {
        let name = t.name.value.clone();
        let at = format!("{f}:{}: target '{name}'", t.name.referenced.line());
        if let Err(e) = check_name(&name) {
            errors.push(format!("{at}: name: {e}"));
        }
        if targets.iter().any(|o: &TargetPlan| o.name == name) {
            errors.push(format!("{at}: name: two targets have this name"));
        }
        if let Some(c) = &t.cpus {
            if let Err(e) = check_cpus(c) {
                errors.push(format!("{at}: cpus: {e}"));
            }
        }
        let argv = match argv_of(&t.command, &t.cpus, &every) {
            Ok(a) => a,
            Err(e) => {
                errors.push(format!("{at}: command: {e}"));
                continue;
            }
        };
        if t.suites.is_empty() {
            errors.push(format!("{at}: suites: the target serves no suite"));
        }
        let mut runs = Vec::new();
        let mut ready = Vec::new();
        for (sname, ts) in &t.suites {
            let Some(round_suite) = suites.get(sname) else {
                errors.push(format!(
                    "{at}: suites.{sname}: the round measures no such suite (its suites: {})",
                    raw.suites.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                continue;
            };
            match host_port(&ts.base) {
                Ok(hp) => {
                    if !ready.contains(&hp) {
                        ready.push(hp);
                    }
                }
                Err(e) => {
                    errors.push(format!("{at}: suites.{sname}.base: {e}"));
                    continue;
                }
            }
            let mut run = round_suite.clone();
            run.base = ts.base.trim_end_matches('/').to_string();
            run.compare = t.compare;
            if let Some(own) = &ts.scenarios {
                match scenarios_of(run.suite, &Some(own.clone())) {
                    Ok(list) => {
                        if let Some(extra) = list.iter().find(|s| !run.scenarios.contains(s)) {
                            errors.push(format!(
                                "{at}: suites.{sname}.scenarios: {extra} is not one of the round's scenarios"
                            ));
                        }
                        run.scenarios.retain(|s| list.contains(s));
                    }
                    Err(e) => errors.push(format!("{at}: suites.{sname}.scenarios: {e}")),
                }
            }
            for (scenario, path) in &ts.paths {
                let at_key = format!("{at}: suites.{sname}.paths.{scenario}");
                let Ok(s) = scenario.parse::<Scenario>() else {
                    errors.push(format!("{at_key}: no such scenario"));
                    continue;
                };
                let url = match host_port(&run.base) {
                    Ok(hp) if path.starts_with('/') => format!("http://{hp}{path}"),
                    _ => path.clone(),
                };
                match Url::parse(&url) {
                    Ok(_) => {
                        run.urls.insert(s, url);
                    }
                    Err(e) => errors.push(format!("{at_key}: {e}")),
                }
            }
            runs.push(run);
        }
        targets.push(TargetPlan {
            name,
            version: t.version.clone(),
            process: ProcessPlan {
                argv,
                dir: t
                    .dir
                    .as_ref()
                    .map_or(folder.to_path_buf(), |d| folder.join(d)),
                env: t.env.clone(),
                cpus: t.cpus.clone(),
                ready,
                ready_timeout_s: t.ready_timeout.0.as_secs_f64(),
                stop_timeout_s: t.stop_timeout.0.as_secs_f64(),
            },
            warmup: args
                .warmup
                .or(t.warmup.map(|w| w.0))
                .unwrap_or(raw.warmup.0),
            suites: runs,
        });
    }
    if let Some(only) = &args.only {
        for o in only {
            if !targets.iter().any(|t| &t.name == o) {
                errors.push(format!("--only: {f} has no target '{o}'"));
            }
        }
        targets.retain(|t| only.contains(&t.name));
    }
    if !errors.is_empty() {
        return Err(BenchError::Usage(errors.join("\n")));
    }
    Ok(Plan {
        file: file.to_path_buf(),
        text: text.to_string(),
        title: raw.title,
        rounds,
        duration,
        warmup: args.warmup.unwrap_or(raw.warmup.0),
        cell_warmup: raw.cell_warmup.0,
        settle: raw.settle.0,
        keep_alive: raw.keep_alive,
        verify: raw.verify,
        threads: raw.threads,
        timeout: raw.timeout.0,
        load_cpus: raw.load_cpus,
        backend,
        targets,
    })
}

impl Plan {
    /// Cells of the whole round.
    pub fn total_cells(&self) -> usize {
        self.rounds * self.targets.iter().map(TargetPlan::cells).sum::<usize>()
    }

    /// Seconds the round should take, start-ups excluded.
    pub fn estimate_s(&self) -> f64 {
        let per_cell = (self.duration + self.cell_warmup).as_secs_f64();
        self.rounds as f64
            * self
                .targets
                .iter()
                .map(|t| t.warmup.as_secs_f64() + per_cell * t.cells() as f64)
                .sum::<f64>()
    }
}

/// One start of one target (or of the back end).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Start {
    /// Round, from 1 (0 for the back end).
    pub round: usize,
    /// Milliseconds from launch to ready; `None` when it never got ready.
    pub startup_ms: Option<f64>,
    /// Highest resident memory of its processes together, sampled every 100 ms, KiB.
    pub peak_rss_kib: u64,
    /// Cells measured in this start.
    pub cells: usize,
    /// Answers of the warm-up that were errors.
    pub warmup_errors: u64,
    /// Seconds spent after cells waiting for the ESB to work off what they left, in total.
    #[serde(default)]
    pub settle_s: f64,
    /// The longest of those waits, seconds.
    #[serde(default)]
    pub settle_max_s: f64,
    /// Why it did not start, or what went wrong while it ran.
    pub error: Option<String>,
    /// How it ended (`exit status 0`, `signal 15`, `killed after the stop timeout`).
    pub exit: Option<String>,
    /// Its log, relative to the round folder.
    pub log: String,
}

/// A target in `round.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TargetRecord {
    /// Name.
    pub name: String,
    /// Version.
    pub version: Option<String>,
    /// Command line as run.
    pub argv: Vec<String>,
    /// Working directory.
    pub dir: String,
    /// Added environment.
    pub env: BTreeMap<String, String>,
    /// CPUs.
    pub cpus: Option<String>,
    /// Run folders (`bench run` layout), by suite, relative to the round folder.
    pub runs: BTreeMap<String, String>,
    /// Every start.
    pub starts: Vec<Start>,
}

/// `round.json`: the round's index.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RoundInfo {
    /// Always [`ROUND_SCHEMA`].
    pub schema: String,
    /// Title.
    pub title: String,
    /// The round file as given.
    pub file: String,
    /// The kit's command line.
    pub command: Vec<String>,
    /// busbar-bench version.
    pub bench_version: String,
    /// Where it ran.
    pub machine: Machine,
    /// Start, Unix seconds.
    pub started_unix: u64,
    /// End, Unix seconds (0 while running).
    pub finished_unix: u64,
    /// Wall time so far, seconds.
    pub wall_s: f64,
    /// Rounds asked for.
    pub rounds: usize,
    /// Rounds begun.
    pub rounds_begun: usize,
    /// Measured seconds per cell.
    pub duration_s: f64,
    /// Warm-up per cell, seconds.
    pub cell_warmup_s: f64,
    /// Keep-alive.
    pub keep_alive: bool,
    /// Answers verified.
    pub verify: bool,
    /// Load threads.
    pub threads: usize,
    /// The kit's CPUs.
    pub load_cpus: Option<String>,
    /// True when Ctrl-C ended the round early.
    pub interrupted: bool,
    /// Cells planned.
    pub cells_planned: usize,
    /// Cells measured.
    pub cells_measured: usize,
    /// The back end and its start.
    pub backend: Option<(ProcessPlan, Start)>,
    /// The targets.
    pub targets: Vec<TargetRecord>,
}

/// Set by Ctrl-C (SIGINT) or SIGTERM for the rest of the round.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Watches for Ctrl-C on a thread of its own for the life of the process (each load run also
/// sees it and ends its cell).
fn watch_interrupts() {
    static STARTED: AtomicBool = AtomicBool::new(false);
    if STARTED.swap(true, Ordering::SeqCst) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("round-signals".into())
        .spawn(|| {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let Ok(mut term) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                else {
                    return;
                };
                loop {
                    tokio::select! {
                        r = tokio::signal::ctrl_c() => if r.is_err() { return },
                        _ = term.recv() => {}
                    }
                    if !INTERRUPTED.swap(true, Ordering::SeqCst) {
                        eprintln!("\nstopping: the current cell ends, the targets stop, what was measured is kept");
                    }
                }
            });
        });
    if spawned.is_err() {
        eprintln!("warning: cannot watch for Ctrl-C; the round cannot be stopped cleanly");
    }
}

/// A started process in its own process group, with its memory sampled.
struct Running {
    child: Child,
    launched: Instant,
    peak_kib: Arc<AtomicU64>,
    sampling: Arc<AtomicBool>,
    sampler: Option<std::thread::JoinHandle<()>>,
}

fn spawn(p: &ProcessPlan, log: &Path) -> Result<Running, String> {
    let out = std::fs::File::create(log)
        .map_err(|e| format!("cannot create the log {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("cannot share the log {}: {e}", log.display()))?;
    let mut cmd = Command::new(&p.argv[0]);
    cmd.args(&p.argv[1..])
        .current_dir(&p.dir)
        .envs(&p.env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    // Its own process group: a terminal's Ctrl-C reaches the kit only, and a stop reaches a
    // script's children too.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let launched = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", p.argv.join(" ")))?;
    let peak_kib = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let group = child.id();
    let sampler = {
        let (peak, on) = (peak_kib.clone(), sampling.clone());
        std::thread::Builder::new()
            .name("round-rss".into())
            .spawn(move || {
                while on.load(Ordering::Relaxed) {
                    peak.fetch_max(group_rss_kib(group), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok()
    };
    Ok(Running {
        child,
        launched,
        peak_kib,
        sampling,
        sampler,
    })
}

/// Resident memory of every process in process group `group`, KiB.
fn group_rss_kib(group: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut total = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command's closing parenthesis: state, ppid, pgrp, …
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if rest.split_whitespace().nth(2) != Some(&group.to_string()) {
            continue;
        }
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
            total += status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    total
}

impl Running {
    /// Still running? `Some(how it ended)` otherwise.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(describe(status)),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited for: {e}")),
        }
    }

    /// SIGTERM to the group, SIGKILL after `timeout`; how it ended.
    fn stop(mut self, timeout: Duration) -> (String, u64) {
        let group = format!("-{}", self.child.id());
        let ended = match self.exited() {
            Some(how) => Some(how),
            None => {
                signal_group("TERM", &group);
                let deadline = Instant::now() + timeout;
                loop {
                    if let Some(how) = self.exited() {
                        break Some(how);
                    }
                    if Instant::now() >= deadline {
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        let how = match ended {
            Some(how) => how,
            None => {
                signal_group("KILL", &group);
                let _ = self.child.kill();
                let _ = self.child.wait();
                format!("killed {} s after SIGTERM", timeout.as_secs_f64())
            }
        };
        // The leader may be gone while others of its group live on (a script's JVM).
        signal_group("KILL", &group);
        self.sampling.store(false, Ordering::Relaxed);
        if let Some(h) = self.sampler.take() {
            let _ = h.join();
        }
        (how, self.peak_kib.load(Ordering::Relaxed))
    }
}

fn signal_group(signal: &str, group: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", group])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => status.to_string(),
    }
}

fn resolve_addr(hp: &str) -> Option<SocketAddr> {
    hp.to_socket_addrs().ok()?.next()
}

/// Connects, and for an HTTP target sends `GET /` and waits for a status line: any status is
/// an answer.
fn answers(hp: &str, http: bool) -> bool {
    let Some(addr) = resolve_addr(hp) else {
        return false;
    };
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    if !http {
        return true;
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET / HTTP/1.1\r\nHost: {hp}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 5];
    s.read_exact(&mut head).is_ok() && &head == b"HTTP/"
}

/// Waits until every address answers; `Ok(ms)` or why not.
fn wait_ready(r: &mut Running, p: &ProcessPlan, http: bool) -> Result<f64, String> {
    let deadline = r.launched + Duration::from_secs_f64(p.ready_timeout_s);
    let mut pending: Vec<&String> = p.ready.iter().collect();
    loop {
        if let Some(how) = r.exited() {
            return Err(format!("it ended before it was ready ({how})"));
        }
        pending.retain(|hp| !answers(hp, http));
        if pending.is_empty() {
            return Ok(round3(r.launched.elapsed().as_secs_f64() * 1000.0));
        }
        if interrupted() {
            return Err("interrupted before it was ready".into());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not ready after {} s: nothing answered at {}",
                p.ready_timeout_s,
                pending
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Before a start: an address that already answers belongs to another process, and would make
/// the target look ready.
fn taken(p: &ProcessPlan) -> Option<&String> {
    p.ready.iter().find(|hp| answers(hp, false))
}

fn pin_self(cpus: &str) -> Result<(), BenchError> {
    let pid = std::process::id().to_string();
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| BenchError::io("cannot run taskset for load_cpus", e))?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Failed(format!(
            "taskset could not pin the load generator to CPUs {cpus}"
        )))
    }
}

/// The requests of one cell.
#[derive(Clone)]
struct Shot {
    url: Url,
    requests: Requests,
    body_len: usize,
    version: Version,
}

/// The requests of one scenario and size. WS-Security messages are fresh, so they are made
/// for one cell: `clients` is its concurrency, and at least that many are built before it.
fn cell_requests(
    run: &SuiteRun,
    scenario: Scenario,
    size: usize,
    plan: &Plan,
    clients: usize,
) -> Result<Shot, BenchError> {
    let at = run.url_of(scenario);
    let url = Url::parse(&at).map_err(BenchError::Usage)?;
    let shape = Shape {
        size,
        seed: 1,
        products: PRODUCTS,
    };
    if let Some(profile) = scenario.secure_profile() {
        // Fresh secured messages of the plain payload, each answer decrypted, verified and
        // compared with it.
        let keys = run.keys.as_deref().ok_or_else(|| {
            BenchError::Usage(format!("{scenario} needs the suite's keys folder"))
        })?;
        let client = crate::secure::SecureClient::load(keys, profile)?;
        let body = crate::payload::buy_stocks(size, crate::payload::Variant::Plain)
            .map_err(|e| BenchError::Usage(e.to_string()))?;
        let mut spec =
            crate::client::RequestSpec::soap(url.clone(), body, crate::payload::soap_action(size));
        spec.keep_alive = plan.keep_alive;
        let (body_len, version) = (spec.body.len(), spec.version);
        let pool = if run.replay { 1 } else { run.pool.max(clients) };
        let feed = crate::secure::Feed::new(client, spec, pool, run.replay)?;
        return Ok(Shot {
            url,
            requests: Requests::Secure(Arc::new(feed)),
            body_len,
            version,
        });
    }
    let mut specs = load::scenario_requests_at(scenario, &at, shape)?;
    for (spec, check) in &mut specs {
        spec.keep_alive = plan.keep_alive;
        if !plan.verify {
            *check = crate::check::Check::Status200;
        } else if let (Compare::Xml, crate::check::Check::Echo(sent)) = (run.compare, &*check) {
            *check = crate::check::Check::SameXml(sent.clone());
        }
    }
    let body_len = specs.first().map_or(0, |(s, _)| s.body.len());
    let version = specs.first().map_or(Version::Http11, |(s, _)| s.version);
    let requests = Requests::from_specs(specs).map_err(BenchError::Failed)?;
    Ok(Shot {
        url,
        requests,
        body_len,
        version,
    })
}

fn load_plan_for(
    plan: &Plan,
    shot: &Shot,
    concurrency: usize,
    duration: Duration,
    warmup: Duration,
) -> Result<LoadPlan, BenchError> {
    let addr = load::resolve(&shot.url)?;
    Ok(LoadPlan {
        url: shot.url.clone(),
        addr,
        requests: shot.requests.clone(),
        body_len: shot.body_len,
        concurrency,
        threads: plan.threads.min(concurrency),
        stop: StopRule::Duration(duration),
        warmup,
        rate: None,
        keep_alive: plan.keep_alive,
        version: shot.version,
        timeout: plan.timeout,
    })
}

/// What a round ended with.
#[derive(Debug)]
pub struct Outcome {
    /// The index as written.
    pub info: RoundInfo,
    /// Some target failed to start or the back end failed.
    pub failed_starts: usize,
    /// Cells with answers that failed their check, each with its target and counts.
    pub failed_cells: Vec<String>,
}

struct Progress {
    total: usize,
    done: usize,
    planned_s: f64,
    planned_done_s: f64,
    started: Instant,
    tty: bool,
}

impl Progress {
    fn eta(&self) -> String {
        if self.planned_done_s <= 0.0 {
            return format!("~{}", fmt_secs(self.planned_s));
        }
        let rate = self.started.elapsed().as_secs_f64() / self.planned_done_s;
        fmt_secs((self.planned_s - self.planned_done_s).max(0.0) * rate)
    }

    fn line(&self, text: &str) {
        if self.tty {
            eprint!("\r\x1b[2K{text}");
        } else {
            eprintln!("{text}");
        }
    }

    fn note(&self, text: &str) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{text}");
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Runs `bench round`.
pub fn command(args: &RoundArgs) -> Result<Outcome, BenchError> {
    let plan = load_plan(&args.file, args)?;
    if args.dry_run {
        print!("{}", describe_plan(&plan));
        return Ok(Outcome {
            info: new_info(&plan),
            failed_starts: 0,
            failed_cells: Vec::new(),
        });
    }
    run_plan(&plan, &args.out)
}

/// The plan in words (`--dry-run`).
pub fn describe_plan(plan: &Plan) -> String {
    let mut s = format!(
        "{}: {} round(s), {} cells, about {} of measuring (start-ups excluded)\n",
        plan.title,
        plan.rounds,
        plan.total_cells(),
        fmt_secs(plan.estimate_s())
    );
    if let Some(b) = &plan.backend {
        s.push_str(&format!("back end: {}\n", b.argv.join(" ")));
    }
    for t in &plan.targets {
        s.push_str(&format!(
            "target {}: {} cells per round, warm-up {} s: {}\n",
            t.name,
            t.cells(),
            t.warmup.as_secs_f64(),
            t.process.argv.join(" ")
        ));
        for r in &t.suites {
            s.push_str(&format!(
                "  {} at {}: {} × sizes {:?} × c {:?}\n",
                r.suite.name(),
                r.base,
                r.scenarios
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(","),
                r.sizes,
                r.concurrency
            ));
        }
    }
    s
}

fn new_info(plan: &Plan) -> RoundInfo {
    RoundInfo {
        schema: ROUND_SCHEMA.into(),
        title: plan.title.clone(),
        file: plan.file.display().to_string(),
        command: std::env::args().collect(),
        bench_version: env!("CARGO_PKG_VERSION").into(),
        machine: Machine::current(),
        started_unix: unix_now(),
        finished_unix: 0,
        wall_s: 0.0,
        rounds: plan.rounds,
        rounds_begun: 0,
        duration_s: plan.duration.as_secs_f64(),
        cell_warmup_s: plan.cell_warmup.as_secs_f64(),
        keep_alive: plan.keep_alive,
        verify: plan.verify,
        threads: plan.threads,
        load_cpus: plan.load_cpus.clone(),
        interrupted: false,
        cells_planned: plan.total_cells(),
        cells_measured: 0,
        backend: None,
        targets: plan
            .targets
            .iter()
            .map(|t| TargetRecord {
                name: t.name.clone(),
                version: t.version.clone(),
                argv: t.process.argv.clone(),
                dir: t.process.dir.display().to_string(),
                env: t.process.env.clone(),
                cpus: t.process.cpus.clone(),
                runs: t
                    .suites
                    .iter()
                    .map(|r| {
                        (
                            r.suite.name().to_string(),
                            format!("targets/{}/{}", t.name, r.suite.name()),
                        )
                    })
                    .collect(),
                starts: Vec::new(),
            })
            .collect(),
    }
}

/// The run index of one target's suite, as `bench run` writes it (iterations are rounds).
fn new_run(plan: &Plan, t: &TargetPlan, r: &SuiteRun, machine: &Machine) -> RunInfo {
    RunInfo {
        schema: RUN_SCHEMA.into(),
        target: TargetInfo {
            name: t.name.clone(),
            version: t.version.clone(),
            base_url: r.base.clone(),
        },
        suite: r.suite.name().into(),
        bench_version: env!("CARGO_PKG_VERSION").into(),
        machine: machine.clone(),
        started_unix: unix_now(),
        finished_unix: 0,
        iterations: plan.rounds,
        duration_s: plan.duration.as_secs_f64(),
        warmup_s: plan.cell_warmup.as_secs_f64(),
        threads: plan.threads,
        scenarios: r.scenarios.iter().map(|s| s.name().to_string()).collect(),
        sizes: r.sizes.clone(),
        concurrency: r.concurrency.clone(),
        interrupted: false,
        cells: Vec::new(),
        failed_cells: Vec::new(),
    }
}

/// Runs a resolved plan into `out`.
pub fn run_plan(plan: &Plan, out: &Path) -> Result<Outcome, BenchError> {
    if out.join("round.json").exists() {
        return Err(BenchError::Usage(format!(
            "{} already holds a round: give another --out",
            out.display()
        )));
    }
    let max_c = plan
        .targets
        .iter()
        .flat_map(|t| t.suites.iter().flat_map(|r| r.concurrency.iter().copied()))
        .max()
        .unwrap_or(1);
    crate::load::check_concurrency(max_c)?;
    for dir in [out.to_path_buf(), out.join("logs"), out.join("csv")] {
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io(format!("cannot create {}", dir.display()), e))?;
    }
    let copy = out.join("round.yaml");
    std::fs::write(&copy, &plan.text)
        .map_err(|e| BenchError::io(format!("cannot write {}", copy.display()), e))?;
    watch_interrupts();
    // The machine as it is, before the kit pins itself to fewer CPUs.
    let mut info = new_info(plan);
    if let Some(cpus) = &plan.load_cpus {
        pin_self(cpus)?;
    }
    let started = Instant::now();
    let mut runs: BTreeMap<(usize, usize), RunInfo> = BTreeMap::new();
    let mut progress = Progress {
        total: plan.total_cells(),
        done: 0,
        planned_s: plan.estimate_s(),
        planned_done_s: 0.0,
        started,
        tty: std::io::stderr().is_terminal(),
    };
    let mut failed_starts = 0;
    let save = |info: &mut RoundInfo, runs: &BTreeMap<(usize, usize), RunInfo>| {
        info.wall_s = round3(started.elapsed().as_secs_f64());
        write_index(out, plan, info, runs)
    };

    let mut backend = None;
    if let Some(b) = &plan.backend {
        let log = "logs/backend.log".to_string();
        let mut start = Start {
            round: 0,
            startup_ms: None,
            peak_rss_kib: 0,
            cells: 0,
            warmup_errors: 0,
            settle_s: 0.0,
            settle_max_s: 0.0,
            error: None,
            exit: None,
            log: log.clone(),
        };
        let outcome = match taken(b) {
            Some(hp) => Err(format!("{hp} already answers: another process holds it")),
            None => {
                spawn(b, &out.join(&log)).and_then(|mut r| match wait_ready(&mut r, b, false) {
                    Ok(ms) => Ok((r, ms)),
                    Err(e) => {
                        let (how, _) = r.stop(Duration::from_secs_f64(b.stop_timeout_s));
                        Err(format!("{e}; {how}"))
                    }
                })
            }
        };
        match outcome {
            Ok((r, ms)) => {
                start.startup_ms = Some(ms);
                progress.note(&format!("back end ready in {ms:.0} ms"));
                backend = Some(r);
            }
            Err(e) => {
                start.error = Some(format!("the back end did not start: {e}"));
                progress.note(&format!("back end: {e} (see {})", out.join(&log).display()));
                info.backend = Some((b.clone(), start));
                info.finished_unix = unix_now();
                save(&mut info, &runs)?;
                return Ok(Outcome {
                    info,
                    failed_starts: 1,
                    failed_cells: Vec::new(),
                });
            }
        }
        info.backend = Some((b.clone(), start));
    }

    'rounds: for round in 1..=plan.rounds {
        info.rounds_begun = round;
        for (ti, t) in plan.targets.iter().enumerate() {
            if interrupted() {
                break 'rounds;
            }
            let log = format!("logs/{}-round{round}.log", t.name);
            let mut start = Start {
                round,
                startup_ms: None,
                peak_rss_kib: 0,
                cells: 0,
                warmup_errors: 0,
                settle_s: 0.0,
                settle_max_s: 0.0,
                error: None,
                exit: None,
                log: log.clone(),
            };
            let mut running = match taken(&t.process) {
                Some(hp) => Err(format!("{hp} already answers: another process holds it")),
                None => spawn(&t.process, &out.join(&log)),
            };
            let ready = match &mut running {
                Ok(r) => wait_ready(r, &t.process, true),
                Err(e) => Err(e.clone()),
            };
            let planned = t.warmup.as_secs_f64()
                + (plan.duration + plan.cell_warmup).as_secs_f64() * t.cells() as f64;
            match ready {
                Ok(ms) => {
                    start.startup_ms = Some(ms);
                    progress.note(&format!(
                        "round {round}/{}: {} ready in {ms:.0} ms",
                        plan.rounds, t.name
                    ));
                    match measure_target(
                        plan,
                        t,
                        (ti, round),
                        out,
                        &mut runs,
                        &mut progress,
                        &info.machine,
                    ) {
                        Ok(tally) => {
                            start.cells = tally.cells;
                            start.warmup_errors = tally.warm_errors;
                            start.settle_s = round3(tally.settle.as_secs_f64());
                            start.settle_max_s = round3(tally.settle_max.as_secs_f64());
                            if !tally.problems.is_empty() {
                                start.error = Some(summarize_problems(&tally.problems));
                            }
                        }
                        Err(e) => {
                            start.error = Some(e.to_string());
                            progress.note(&format!("{}: {e}", t.name));
                        }
                    }
                    if let Ok(r) = &mut running {
                        if let Some(how) = r.exited() {
                            let e = format!("it ended while being measured ({how})");
                            start.error.get_or_insert(e);
                        }
                    }
                }
                Err(e) => {
                    failed_starts += 1;
                    progress.note(&format!(
                        "round {round}/{}: {} did not start: {e} (see {})",
                        plan.rounds,
                        t.name,
                        out.join(&log).display()
                    ));
                    start.error = Some(format!("did not start: {e}"));
                    // Its cells count as done for the ETA: the round goes on without them.
                    progress.done += t.cells();
                    progress.planned_done_s += planned;
                }
            }
            if let Ok(r) = running {
                let (how, peak) = r.stop(Duration::from_secs_f64(t.process.stop_timeout_s));
                start.exit = Some(how);
                start.peak_rss_kib = peak;
            }
            info.targets[ti].starts.push(start);
            info.cells_measured = runs.values().map(|r| r.cells.len()).sum();
            save(&mut info, &runs)?;
        }
    }
    if progress.tty {
        eprintln!();
    }
    if let (Some(r), Some(b)) = (backend, &plan.backend) {
        let (how, peak) = r.stop(Duration::from_secs_f64(b.stop_timeout_s));
        if let Some((_, s)) = info.backend.as_mut() {
            s.exit = Some(how);
            s.peak_rss_kib = peak;
        }
    }
    info.interrupted = interrupted();
    for r in runs.values_mut() {
        r.interrupted = info.interrupted;
        r.finished_unix = unix_now();
    }
    info.finished_unix = unix_now();
    info.cells_measured = runs.values().map(|r| r.cells.len()).sum();
    save(&mut info, &runs)?;
    let failed_cells: Vec<String> = runs
        .values()
        .flat_map(|r| r.failed_cells.iter().cloned())
        .collect();
    crate::matrix::report_failed(&failed_cells);
    eprintln!(
        "round {} in {}: {} of {} cells, report {}",
        if info.interrupted {
            "interrupted"
        } else {
            "done"
        },
        fmt_secs(info.wall_s),
        info.cells_measured,
        info.cells_planned,
        out.join("report.html").display()
    );
    Ok(Outcome {
        info,
        failed_starts,
        failed_cells,
    })
}

/// Warms up and measures every cell of one start of `t`; returns the cells measured, the
/// warm-up's errors and the cells that could not be measured (each with why: the others are
/// measured all the same).
fn measure_target(
    plan: &Plan,
    t: &TargetPlan,
    (ti, round): (usize, usize),
    out: &Path,
    runs: &mut BTreeMap<(usize, usize), RunInfo>,
    progress: &mut Progress,
    machine: &Machine,
) -> Result<Tally, BenchError> {
    // Warm-up: the start's warm-up time spread over its cells' request shapes, at the lowest
    // concurrency, nothing recorded.
    let shapes: Vec<(usize, Scenario, usize)> = t
        .suites
        .iter()
        .enumerate()
        .flat_map(|(si, r)| {
            r.scenarios
                .iter()
                .flat_map(move |&s| r.sizes_of(s).into_iter().map(move |z| (si, s, z)))
        })
        .collect();
    let mut tally = Tally::default();
    if !t.warmup.is_zero() && !shapes.is_empty() {
        let each = (t.warmup / shapes.len() as u32).max(Duration::from_millis(100));
        progress.line(&format!(
            "{}: warming up for {:.0} s",
            t.name,
            t.warmup.as_secs_f64()
        ));
        for &(si, scenario, size) in &shapes {
            if interrupted() {
                break;
            }
            let r = &t.suites[si];
            let c = r.concurrency.iter().copied().min().unwrap_or(1);
            // A shape that cannot be sent is reported with its cells, below.
            let warmed = cell_requests(r, scenario, size, plan, c)
                .and_then(|shot| load_plan_for(plan, &shot, c, each, Duration::ZERO))
                .and_then(|lp| load::execute(&lp));
            match warmed {
                Ok(result) => tally.warm_errors += result.errors.total(),
                Err(_) => tally.warm_errors += 1,
            }
        }
    }
    progress.planned_done_s += t.warmup.as_secs_f64();
    for (si, r) in t.suites.iter().enumerate() {
        let dir = out.join(format!("targets/{}/{}", t.name, r.suite.name()));
        std::fs::create_dir_all(dir.join("cells"))
            .map_err(|e| BenchError::io(format!("cannot create {}", dir.display()), e))?;
        runs.entry((ti, si))
            .or_insert_with(|| new_run(plan, t, r, machine));
        for &scenario in &r.scenarios {
            for size in r.sizes_of(scenario) {
                let first = r.concurrency.first().copied().unwrap_or(1);
                let shot = match cell_requests(r, scenario, size, plan, first) {
                    Ok(shot) => shot,
                    Err(e) => {
                        // Its cells are skipped, the others measured.
                        let why = format!("{scenario} {size} B: {e}");
                        progress.note(&format!("{}: {why}", t.name));
                        tally.problems.push(why);
                        progress.done += r.concurrency.len();
                        continue;
                    }
                };
                for &concurrency in &r.concurrency {
                    if interrupted() {
                        return Ok(tally);
                    }
                    progress.done += 1;
                    let label = format!(
                        "[{}/{}] round {round} {} {scenario} {} c={concurrency}",
                        progress.done,
                        progress.total,
                        t.name,
                        if size == 0 {
                            "-".to_string()
                        } else {
                            format!("{size} B")
                        }
                    );
                    if progress.tty {
                        // A log gets one line per cell, when it is measured.
                        progress.line(&format!("{label}: measuring (ETA {})", progress.eta()));
                    }
                    // Fresh messages are used up by a cell: the next one gets its own.
                    let fresh = if scenario.secure_profile().is_some() && concurrency != first {
                        cell_requests(r, scenario, size, plan, concurrency)
                    } else {
                        Ok(shot.clone())
                    };
                    let measured = fresh
                        .and_then(|shot| {
                            load_plan_for(plan, &shot, concurrency, plan.duration, plan.cell_warmup)
                        })
                        .and_then(|lp| load::execute(&lp));
                    progress.planned_done_s += (plan.duration + plan.cell_warmup).as_secs_f64();
                    let result = match measured {
                        Ok(result) => result,
                        Err(e) => {
                            let why = format!("{scenario} {size} B c={concurrency}: {e}");
                            progress.note(&format!("{label}: {e}"));
                            tally.problems.push(why);
                            continue;
                        }
                    };
                    let unanswered = result.unanswered;
                    let name = format!(
                        "{} {scenario} {size} B c={concurrency} round {round}",
                        t.name
                    );
                    if let Some(failed) = crate::matrix::failed_check(&name, &result) {
                        if let Some(run) = runs.get_mut(&(ti, si)) {
                            run.failed_cells.push(failed);
                        }
                    }
                    let settled = settle(plan, &shot, scenario);
                    tally.settle += settled;
                    tally.settle_max = tally.settle_max.max(settled);
                    progress.line(&format!(
                        "{label}: {:.1} tps, p99 {:.3} ms, {} errors ({} verify){}{}, ETA {}",
                        result.tps,
                        result.latency_ms.p99,
                        result.errors.total(),
                        result.errors.verify,
                        if unanswered > 0 {
                            format!(", {unanswered} client(s) never answered")
                        } else {
                            String::new()
                        },
                        if settled >= Duration::from_secs(1) {
                            format!(", settled in {:.1} s", settled.as_secs_f64())
                        } else {
                            String::new()
                        },
                        progress.eta()
                    ));
                    let key = CellKey {
                        scenario,
                        size,
                        concurrency,
                        round,
                    };
                    write_cell(out, t, r, key, result, runs.get_mut(&(ti, si)))?;
                    tally.cells += 1;
                }
            }
        }
    }
    Ok(tally)
}

/// What one start of a target measured.
#[derive(Debug, Default)]
struct Tally {
    cells: usize,
    warm_errors: u64,
    /// Cells that could not be measured, with why.
    problems: Vec<String>,
    settle: Duration,
    settle_max: Duration,
}

/// After a cell: one request of it, alone, until answered (or the round's `settle` passes), so
/// that what the cell left unanswered is worked off before the next cell. Returns the wait.
fn settle(plan: &Plan, shot: &Shot, scenario: Scenario) -> Duration {
    // Fresh WS-Security messages would be spent on it; those cells are measured one after the
    // other without the wait.
    if plan.settle.is_zero() || scenario.secure_profile().is_some() || interrupted() {
        return Duration::ZERO;
    }
    let started = Instant::now();
    let Ok(mut probe) = load_plan_for(plan, shot, 1, plan.settle, Duration::ZERO) else {
        return started.elapsed();
    };
    probe.stop = StopRule::Requests(1);
    probe.keep_alive = false;
    probe.timeout = plan.settle;
    let _ = load::execute(&probe);
    started.elapsed()
}

/// The cells a start could not measure, in one line (the first few in full).
fn summarize_problems(problems: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = format!(
        "{} cell(s) not measured: {}",
        problems.len(),
        problems[..problems.len().min(SHOWN)].join("; ")
    );
    if problems.len() > SHOWN {
        text.push_str(&format!("; and {} more", problems.len() - SHOWN));
    }
    text
}

/// Where a cell sits in its run.
#[derive(Clone, Copy)]
struct CellKey {
    scenario: Scenario,
    size: usize,
    concurrency: usize,
    round: usize,
}

fn write_cell(
    out: &Path,
    t: &TargetPlan,
    r: &SuiteRun,
    key: CellKey,
    result: LoadResult,
    run: Option<&mut RunInfo>,
) -> Result<(), BenchError> {
    let CellKey {
        scenario,
        size,
        concurrency,
        round,
    } = key;
    let rel = format!(
        "cells/{}-{size}-c{concurrency}-i{round}.json",
        scenario.name()
    );
    let dir = out.join(format!("targets/{}/{}", t.name, r.suite.name()));
    let cell = Cell {
        schema: CELL_SCHEMA.into(),
        target: TargetInfo {
            name: t.name.clone(),
            version: t.version.clone(),
            base_url: r.base.clone(),
        },
        scenario: scenario.name().into(),
        size,
        concurrency,
        iteration: round,
        result,
    };
    crate::write_json(&dir.join(&rel), &cell)?;
    if let Some(run) = run {
        run.cells.push(rel);
        run.finished_unix = unix_now();
        crate::write_json(&dir.join("run.json"), run)?;
    }
    Ok(())
}

/// Writes `round.json`, the run indexes, the CSV files and the report: after every start, so
/// the folder is complete whenever the round stops.
fn write_index(
    out: &Path,
    plan: &Plan,
    info: &RoundInfo,
    runs: &BTreeMap<(usize, usize), RunInfo>,
) -> Result<(), BenchError> {
    for (&(ti, si), run) in runs {
        let t = &plan.targets[ti];
        let dir = out.join(format!("targets/{}/{}", t.name, t.suites[si].suite.name()));
        crate::write_json(&dir.join("run.json"), run)?;
    }
    crate::write_json(&out.join("round.json"), info)?;
    crate::round_report::write(out, info)
}
