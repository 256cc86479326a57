//! `bench run`: the benchmark matrix. Every cell (scenario × size × concurrency × iteration)
//! is warmed up, then measured for a fixed duration with every response verified; each cell
//! is written as JSON as soon as it ends, with a summary CSV and a `run.json` index.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::check::{Check, Scenario};
use crate::client::{RequestSpec, Url};
use crate::error::BenchError;
use crate::load::{self, LoadPlan, LoadResult, StopRule};
use crate::payload::{buy_stocks, soap_action, Variant};
use crate::util::{parse_count, parse_duration, parse_size, unix_now, Machine};

/// Schema tag of `run.json`.
pub const RUN_SCHEMA: &str = "busbar-bench/run/v1";
/// Schema tag of a cell file.
pub const CELL_SCHEMA: &str = "busbar-bench/cell/v1";
/// Header of `summary.csv`.
pub const SUMMARY_HEADER: &str = "scenario,size,concurrency,iteration,requests,successes,errors,\
verify_failures,tps,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,response_bytes_mean";

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    s.parse()
}

fn parse_suite(s: &str) -> Result<String, String> {
    match s {
        "classic" => Ok(s.to_string()),
        _ => Err(format!("unknown suite '{s}' (supported: classic)")),
    }
}

/// Options of `bench run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Scenario suite (only `classic`, contract §3.1–3.5, for now).
    #[arg(long, default_value = "classic", value_parser = parse_suite)]
    pub suite: String,
    /// Base URL the proxy names are appended to, e.g. http://127.0.0.1:8280/service.
    #[arg(long)]
    pub base: String,
    /// Name of the ESB under test (shown in reports).
    #[arg(long)]
    pub name: String,
    /// Version of the ESB under test, as free text (shown in reports).
    #[arg(long)]
    pub target_version: Option<String>,
    /// Iterations of the whole matrix (reports show their median and spread).
    #[arg(long, default_value = "3", value_parser = parse_count)]
    pub iterations: usize,
    /// Measured duration per cell.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Discarded warm-up per cell.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Request sizes.
    #[arg(long, value_delimiter = ',', value_parser = parse_size,
          default_value = "512,1024,5120,10240,102400")]
    pub sizes: Vec<usize>,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "20,80,320")]
    pub concurrency: Vec<usize>,
    /// Scenarios.
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario,
          default_value = "direct,cbr,cbr-soap-header,cbr-transport-header,xslt")]
    pub scenarios: Vec<Scenario>,
    /// Output directory (created; existing cell files are overwritten).
    #[arg(long)]
    pub out: PathBuf,
    /// Load generator worker threads.
    #[arg(long, default_value = "1", value_parser = parse_count)]
    pub threads: usize,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// The ESB under test.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TargetInfo {
    /// Name given with --name.
    pub name: String,
    /// Version given with --target-version.
    pub version: Option<String>,
    /// Base URL.
    pub base_url: String,
}

/// One measured cell (`cells/<scenario>-<size>-c<concurrency>-i<iteration>.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    /// Always [`CELL_SCHEMA`].
    pub schema: String,
    /// The ESB under test.
    pub target: TargetInfo,
    /// Scenario name.
    pub scenario: String,
    /// Request size in bytes.
    pub size: usize,
    /// Concurrent connections.
    pub concurrency: usize,
    /// Iteration, from 1.
    pub iteration: usize,
    /// The measurement (its `url` is the proxy URL).
    pub result: LoadResult,
}

/// The index of a run (`run.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunInfo {
    /// Always [`RUN_SCHEMA`].
    pub schema: String,
    /// The ESB under test.
    pub target: TargetInfo,
    /// Suite name.
    pub suite: String,
    /// busbar-bench version.
    pub bench_version: String,
    /// Where it ran.
    pub machine: Machine,
    /// Start, Unix seconds.
    pub started_unix: u64,
    /// End, Unix seconds.
    pub finished_unix: u64,
    /// Iterations asked for.
    pub iterations: usize,
    /// Measured seconds per cell.
    pub duration_s: f64,
    /// Warm-up seconds per cell.
    pub warmup_s: f64,
    /// Load generator worker threads.
    pub threads: usize,
    /// Scenarios.
    pub scenarios: Vec<String>,
    /// Sizes.
    pub sizes: Vec<usize>,
    /// Concurrency levels.
    pub concurrency: Vec<usize>,
    /// True when Ctrl-C stopped the run early.
    pub interrupted: bool,
    /// Cell files, relative to the directory, in run order.
    pub cells: Vec<String>,
}

/// Runs the matrix; returns the index as written.
pub fn command(args: &RunArgs) -> Result<RunInfo, BenchError> {
    let base = Url::parse(&args.base).map_err(BenchError::Usage)?;
    let addr = load::resolve(&base)?;
    let cells_dir = args.out.join("cells");
    std::fs::create_dir_all(&cells_dir)
        .map_err(|e| BenchError::io(format!("cannot create {}", cells_dir.display()), e))?;
    let target = TargetInfo {
        name: args.name.clone(),
        version: args.target_version.clone(),
        base_url: args.base.clone(),
    };
    let mut info = RunInfo {
        schema: RUN_SCHEMA.into(),
        target: target.clone(),
        suite: args.suite.clone(),
        bench_version: env!("CARGO_PKG_VERSION").into(),
        machine: Machine::current(),
        started_unix: unix_now(),
        finished_unix: 0,
        iterations: args.iterations,
        duration_s: args.duration.as_secs_f64(),
        warmup_s: args.warmup.as_secs_f64(),
        threads: args.threads,
        scenarios: args
            .scenarios
            .iter()
            .map(|s| s.name().to_string())
            .collect(),
        sizes: args.sizes.clone(),
        concurrency: args.concurrency.clone(),
        interrupted: false,
        cells: Vec::new(),
    };
    let mut summary = String::from(SUMMARY_HEADER);
    summary.push('\n');
    let total = args.iterations * args.scenarios.len() * args.sizes.len() * args.concurrency.len();
    let tty = std::io::stderr().is_terminal();
    let mut n = 0;
    'outer: for iteration in 1..=args.iterations {
        for &scenario in &args.scenarios {
            for &size in &args.sizes {
                let body = buy_stocks(size, Variant::Plain)
                    .map_err(|e| BenchError::Usage(e.to_string()))?;
                let check = Check::for_scenario(scenario, &body).map_err(BenchError::Failed)?;
                let url = Url::parse(&scenario.url(&args.base)).map_err(BenchError::Usage)?;
                let spec = RequestSpec::soap(url.clone(), body, soap_action(size));
                let request = Arc::new(spec.to_bytes());
                let check = Arc::new(check);
                for &concurrency in &args.concurrency {
                    n += 1;
                    let label = format!("[{n}/{total}] {} {scenario} {size} B c={concurrency} iteration {iteration}", args.name);
                    if tty {
                        eprint!("\r\x1b[2K{label}: measuring");
                    }
                    let plan = LoadPlan {
                        url: url.clone(),
                        addr,
                        request: request.clone(),
                        body_len: size,
                        check: check.clone(),
                        concurrency,
                        threads: args.threads,
                        stop: StopRule::Duration(args.duration),
                        warmup: args.warmup,
                        rate: None,
                        keep_alive: true,
                        version: spec.version,
                        timeout: args.timeout,
                        feed: None,
                    };
                    let result = load::execute(&plan)?;
                    let line = format!(
                        "{label}: {:.1} tps, p99 {:.3} ms, {} errors ({} verify)",
                        result.tps,
                        result.latency_ms.p99,
                        result.errors.total(),
                        result.errors.verify
                    );
                    if tty {
                        eprint!("\r\x1b[2K{line}");
                    } else {
                        eprintln!("{line}");
                    }
                    summary.push_str(&summary_line(
                        scenario,
                        size,
                        concurrency,
                        iteration,
                        &result,
                    ));
                    let file = format!(
                        "cells/{}-{size}-c{concurrency}-i{iteration}.json",
                        scenario.name()
                    );
                    let interrupted = result.interrupted;
                    let cell = Cell {
                        schema: CELL_SCHEMA.into(),
                        target: target.clone(),
                        scenario: scenario.name().into(),
                        size,
                        concurrency,
                        iteration,
                        result,
                    };
                    crate::write_json(&args.out.join(&file), &cell)?;
                    info.cells.push(file);
                    if interrupted {
                        info.interrupted = true;
                        break 'outer;
                    }
                }
            }
        }
    }
    if tty {
        eprintln!();
    }
    info.finished_unix = unix_now();
    write_text(&args.out.join("summary.csv"), &summary)?;
    crate::write_json(&args.out.join("run.json"), &info)?;
    if info.interrupted {
        eprintln!("interrupted: {} cells measured", info.cells.len());
        print!("{summary}");
    }
    eprintln!("results in {}", args.out.display());
    Ok(info)
}

fn summary_line(sc: Scenario, size: usize, c: usize, it: usize, r: &LoadResult) -> String {
    let l = &r.latency_ms;
    format!(
        "{sc},{size},{c},{it},{},{},{},{},{:.2},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1}\n",
        r.requests,
        r.successes,
        r.errors.total(),
        r.errors.verify,
        r.tps,
        l.p50,
        l.p90,
        l.p95,
        l.p99,
        l.p999,
        l.max,
        r.response_bytes_mean
    )
}

fn write_text(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text)
        .map_err(|e| BenchError::io(format!("cannot write {}", path.display()), e))
}

/// Reads a run directory: its index and every cell it lists.
pub fn read_dir(dir: &Path) -> Result<(RunInfo, Vec<Cell>), BenchError> {
    let read = |p: PathBuf| -> Result<String, BenchError> {
        std::fs::read_to_string(&p)
            .map_err(|e| BenchError::io(format!("cannot read {}", p.display()), e))
    };
    let index = dir.join("run.json");
    let info: RunInfo = serde_json::from_str(&read(index.clone())?).map_err(|e| {
        BenchError::Usage(format!(
            "{} is not a busbar-bench run index: {e}",
            index.display()
        ))
    })?;
    if info.schema != RUN_SCHEMA {
        return Err(BenchError::Usage(format!(
            "{}: unsupported schema '{}'",
            index.display(),
            info.schema
        )));
    }
    let mut cells = Vec::with_capacity(info.cells.len());
    for rel in &info.cells {
        let path = dir.join(rel);
        let cell: Cell = serde_json::from_str(&read(path.clone())?).map_err(|e| {
            BenchError::Usage(format!(
                "{} is not a busbar-bench cell: {e}",
                path.display()
            ))
        })?;
        cells.push(cell);
    }
    Ok((info, cells))
}
