//! `bench run`: the benchmark matrix. Every cell (scenario × size × concurrency × iteration)
//! is warmed up, then measured for a fixed duration with every response verified; each cell
//! is written as JSON as soon as it ends, with a summary CSV and a `run.json` index. A scenario
//! without a size axis (ScatterGather and the database reads without a body, the BPEL suite's
//! messages of one shape) has one cell per concurrency and iteration, size 0.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::check::{Scenario, Suite};
use crate::client::Url;
use crate::error::BenchError;
use crate::integrator::{Shape, PRODUCTS};
use crate::load::{self, LoadPlan, LoadResult, Requests, StopRule};
use crate::util::{
    parse_count, parse_duration, parse_positive_duration, parse_size, unix_now, Machine,
};

/// Schema tag of `run.json`.
pub const RUN_SCHEMA: &str = "busbar-bench/run/v1";
/// Schema tag of a cell file.
pub const CELL_SCHEMA: &str = "busbar-bench/cell/v1";
/// Header of `summary.csv`.
pub const SUMMARY_HEADER: &str = "scenario,size,concurrency,iteration,requests,successes,errors,\
verify_failures,tps,p50_ms,p90_ms,p95_ms,p99_ms,p999_ms,max_ms,response_bytes_mean,unanswered";

/// Default sizes of the classic suite's matrix.
pub const CLASSIC_SIZES: [usize; 5] = [512, 1024, 5120, 10_240, 102_400];
/// Default sizes of the integrator suite's matrix (1 KB and 10 KB passthrough,
/// 1 KB routing, 5 KB transform; 100 KB for the large end).
pub const INTEGRATOR_SIZES: [usize; 4] = [1024, 5120, 10_240, 102_400];

/// Options of `bench run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Scenario suite: `classic` (SOAP), `integrator` (JSON/REST) or `bpel` (orchestration);
    /// docs/scenarios.md describes each scenario.
    #[arg(long, default_value = "classic")]
    pub suite: Suite,
    /// Base URL the scenarios are under: http://127.0.0.1:8280/service (classic proxy names),
    /// http://127.0.0.1:8281/api (integrator paths), http://127.0.0.1:8283/service (bpel).
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
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Discarded warm-up per cell.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Request sizes (default: 512,1024,5120,10240,102400 classic; 1024,5120,10240,102400
    /// integrator).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Option<Vec<usize>>,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "20,80,320")]
    pub concurrency: Vec<usize>,
    /// Scenarios, comma-separated (default: every one of the suite but the WS-Security and
    /// database ones); `bpel` names the four SimpleInvoke processes.
    #[arg(long, value_parser = Scenario::parse_list)]
    pub scenarios: Option<::std::vec::Vec<Scenario>>,
    /// The bpel suite: the SimpleInvoke processes to measure by x, the number of HelloWorld
    /// calls: `0..3` (all, the default), `1`, `0,2`. Each is its own scenario in the results
    /// (`bpel-x0` … `bpel-x3`).
    #[arg(long, value_parser = crate::bpel::parse_x)]
    pub x: Option<::std::vec::Vec<u8>>,
    /// Output directory (created; existing cell files are overwritten).
    #[arg(long)]
    pub out: PathBuf,
    /// Load generator worker threads.
    #[arg(long, default_value = "1", value_parser = parse_count)]
    pub threads: usize,
    /// Per-request timeout.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
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
    /// Cells with answers that failed their check (a `status` or `verify` error), each named
    /// with its counts; the run exits with 1 when there is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_cells: Vec<String>,
}

/// The cell's name and counts when some of its answers failed their check (a wrong status or
/// a body that did not verify): errors with no answer to check are measured, not failures.
pub fn failed_check(name: &str, r: &LoadResult) -> Option<String> {
    (r.errors.status + r.errors.verify > 0).then(|| {
        format!(
            "{name}: {} status and {} verify error(s) in {} requests",
            r.errors.status, r.errors.verify, r.requests
        )
    })
}

/// Runs the matrix; returns the index as written.
pub fn command(args: &RunArgs) -> Result<RunInfo, BenchError> {
    let base = Url::parse(&args.base).map_err(BenchError::Usage)?;
    let mut scenarios = args
        .scenarios
        .clone()
        .unwrap_or_else(|| args.suite.scenarios().to_vec());
    args.suite.admit(&scenarios).map_err(BenchError::Usage)?;
    if let Some(xs) = &args.x {
        crate::bpel::keep_x(&mut scenarios, xs).map_err(BenchError::Usage)?;
    }
    if let Some(s) = scenarios.iter().find(|s| s.secure_profile().is_some()) {
        return Err(BenchError::Usage(format!(
            "{s} is measured with bench load --keys, not in the matrix"
        )));
    }
    // Refused before any cell runs, not when its cell comes up.
    if scenarios.contains(&Scenario::DbWrite) {
        return Err(BenchError::Usage(
            "db-write makes a fresh request for every send: measure it with `bench load --verify db-write`, check it with `bench verify`".into(),
        ));
    }
    let sizes = args.sizes.clone().unwrap_or_else(|| match args.suite {
        Suite::Classic => CLASSIC_SIZES.to_vec(),
        Suite::Integrator => INTEGRATOR_SIZES.to_vec(),
        // One message shape: no size axis.
        Suite::Bpel => vec![0],
    });
    // Refused before any cell runs, not when its cell comes up.
    load::check_concurrency(args.concurrency.iter().copied().max().unwrap_or(1))?;
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
        suite: args.suite.name().into(),
        bench_version: env!("CARGO_PKG_VERSION").into(),
        machine: Machine::current(),
        started_unix: unix_now(),
        finished_unix: 0,
        iterations: args.iterations,
        duration_s: args.duration.as_secs_f64(),
        warmup_s: args.warmup.as_secs_f64(),
        threads: args.threads,
        scenarios: scenarios.iter().map(|s| s.name().to_string()).collect(),
        sizes: sizes.clone(),
        concurrency: args.concurrency.clone(),
        interrupted: false,
        cells: Vec::new(),
        failed_cells: Vec::new(),
    };
    let mut summary = String::from(SUMMARY_HEADER);
    summary.push('\n');
    let sizes_of = |s: &Scenario| if s.sized() { sizes.clone() } else { vec![0] };
    let total = args.iterations
        * scenarios.iter().map(|s| sizes_of(s).len()).sum::<usize>()
        * args.concurrency.len();
    let tty = std::io::stderr().is_terminal();
    let mut n = 0;
    'outer: for iteration in 1..=args.iterations {
        for &scenario in &scenarios {
            for size in sizes_of(&scenario) {
                let shape = Shape {
                    size,
                    seed: 1,
                    products: PRODUCTS,
                };
                let specs = load::scenario_requests(scenario, &args.base, shape)?;
                let url = Url::parse(&scenario.url(&args.base)).map_err(BenchError::Usage)?;
                let version = specs.first().map(|(s, _)| s.version);
                let body_len = specs.first().map_or(0, |(s, _)| s.body.len());
                let requests = Requests::from_specs(specs).map_err(BenchError::Failed)?;
                for &concurrency in &args.concurrency {
                    n += 1;
                    let label = format!("[{n}/{total}] {} {scenario} {size} B c={concurrency} iteration {iteration}", args.name);
                    if tty {
                        eprint!("\r\x1b[2K{label}: measuring");
                    }
                    let plan = LoadPlan {
                        url: url.clone(),
                        addr,
                        requests: requests.clone(),
                        body_len,
                        concurrency,
                        threads: args.threads,
                        stop: StopRule::Duration(args.duration),
                        warmup: args.warmup,
                        rate: None,
                        keep_alive: true,
                        version: version.unwrap_or(crate::client::Version::Http11),
                        timeout: args.timeout,
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
                    let name = format!("{scenario} {size} B c={concurrency} iteration {iteration}");
                    info.failed_cells.extend(failed_check(&name, &result));
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
    report_failed(&info.failed_cells);
    eprintln!("results in {}", args.out.display());
    Ok(info)
}

/// Names on standard error the cells whose answers failed their check, if any.
pub fn report_failed(failed: &[String]) {
    if failed.is_empty() {
        return;
    }
    eprintln!(
        "{} cell(s) had answers that failed their check:",
        failed.len()
    );
    for f in failed {
        eprintln!("  {f}");
    }
}

fn summary_line(sc: Scenario, size: usize, c: usize, it: usize, r: &LoadResult) -> String {
    let l = &r.latency_ms;
    format!(
        "{sc},{size},{c},{it},{},{},{},{},{:.2},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1},{}\n",
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
        r.response_bytes_mean,
        r.unanswered
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
