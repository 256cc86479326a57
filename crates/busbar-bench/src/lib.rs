//! busbar-bench: the benchmark kit behind `busbar bench`.
//!
//! Layout: [`payload`] generates the classic suite's buyStocks requests; [`client`] is a lean
//! HTTP/1.x client; [`load`] drives it (closed loop, open loop, legacy JavaBench mode) into HDR
//! histograms; [`check`] knows the suites, their scenarios and what a correct answer is;
//! [`json_payload`] and [`integrator`] make the integrator suite's JSON requests and compute
//! their expected answers; [`bpel`] makes the orchestration suite's SOAP requests and reads
//! their answers; [`verify`] is the corruption checker over many sizes and
//! concurrencies; [`matrix`] runs the scenario × size × concurrency × iteration matrix into JSON
//! and CSV; [`report`] turns result directories into one self-contained HTML page; [`round`]
//! runs a whole round from a file (starting and stopping every ESB under test) and
//! [`round_report`] writes its report. [`run`] is
//! the single entry point the `busbar` binary calls.

pub mod bpel;
pub mod check;
pub mod client;
pub mod db;
pub mod error;
pub mod integrator;
pub mod load;
pub mod matrix;
pub mod payload;
pub mod report;
pub mod round;
pub mod round_report;
pub mod secure;
pub mod util;
pub mod verify;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

pub use check::{Scenario, Suite};
pub use error::BenchError;
pub use load::LoadArgs;
pub use matrix::RunArgs;
pub mod json_payload;
pub use payload::{buy_stocks, size_for_orders, soap_action, PayloadError, Variant};
pub use report::ReportArgs;
pub use verify::VerifyArgs;

/// `busbar bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Write a buyStocks request payload of an exact size to stdout.
    Payload(PayloadArgs),
    /// Generate load against one URL and report throughput, latency and errors.
    Load(LoadArgs),
    /// Check every scenario for corrupted or wrong answers over many sizes (exit 1 on failure).
    Verify(VerifyArgs),
    /// Run the benchmark matrix (scenarios × sizes × concurrency × iterations) into a directory.
    Run(RunArgs),
    /// Build one self-contained HTML report comparing result directories.
    Report(ReportArgs),
    /// Run a whole benchmark round from a round file: start the back end, then round by round
    /// start each ESB, warm it up, measure its suites, stop it; write the round report.
    Round(round::RoundArgs),
}

/// Options of `bench payload`.
#[derive(clap::Args, Debug, Clone)]
pub struct PayloadArgs {
    /// Exact size in bytes (at least 512; k and m suffixes allowed).
    #[arg(long, value_parser = util::parse_size, required_unless_present_any = ["orders", "json"])]
    pub size: Option<usize>,
    /// Instead of a size, the exact number of orders (the size is then the smallest whose
    /// payload of the variant holds them; at least what the 512-byte minimum holds: 2, or 3
    /// for no-soap-header).
    #[arg(long, conflicts_with = "size", value_parser = util::parse_count)]
    pub orders: Option<usize>,
    /// Which payload.
    #[arg(long, value_enum, default_value_t = Variant::Plain)]
    pub variant: Variant,
    /// A JSON payload of the integrator scenarios instead (docs/integrator.md): `passthrough`,
    /// `premium`, `standard` and `order` at `--size`; `orders` with `--orders` orders, or as
    /// many as fit in `--size`.
    #[arg(long, value_enum)]
    pub json: Option<json_payload::JsonKind>,
    /// Seed of the JSON payloads' values.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Parser, Debug)]
#[command(name = "bench", about = "busbar benchmark kit")]
struct Cli {
    #[command(subcommand)]
    cmd: BenchCommand,
}

/// Parses `bench` arguments (the first item is the program name), as the binary would.
pub fn parse_args<I, T>(args: I) -> Result<BenchCommand, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::try_parse_from(args).map(|c| c.cmd)
}

/// Runs one bench subcommand to completion (builds its own tokio runtime(s)); returns the
/// process exit code.
pub fn run(cmd: BenchCommand) -> ExitCode {
    let result = match &cmd {
        BenchCommand::Payload(a) => payload_command(a).map(|()| ExitCode::SUCCESS),
        BenchCommand::Load(a) => load::command(a).map(|r| {
            if r.interrupted {
                ExitCode::from(130)
            } else if a.verify.is_some() && r.errors.status + r.errors.verify > 0 {
                // An answer failed its check: a verification failed. Errors with no answer to
                // check (connect, timeout, read, write) are measured, not a failure of the run.
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }),
        BenchCommand::Verify(a) => verify::command(a).map(|report| {
            if report.all_passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }),
        BenchCommand::Run(a) => matrix::command(a).map(|s| {
            if s.interrupted {
                ExitCode::from(130)
            } else if !s.failed_cells.is_empty() {
                // Every answer of the matrix is checked, as with `load --verify`.
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }),
        BenchCommand::Report(a) => report::command(a).map(|()| ExitCode::SUCCESS),
        BenchCommand::Round(a) => round::command(a).map(|o| {
            if o.info.interrupted {
                ExitCode::from(130)
            } else if o.failed_starts > 0 || !o.failed_cells.is_empty() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("busbar bench: {e}");
            e.exit_code()
        }
    }
}

fn payload_command(args: &PayloadArgs) -> Result<(), BenchError> {
    if let Some(kind) = args.json {
        if args.orders.is_some() && kind != json_payload::JsonKind::Orders {
            return Err(BenchError::Usage(format!(
                "--orders applies to --json orders, not --json {}",
                clap::ValueEnum::to_possible_value(&kind)
                    .map(|v| v.get_name().to_owned())
                    .unwrap_or_default()
            )));
        }
        let bytes = match (kind, args.size) {
            (json_payload::JsonKind::Orders, Some(size)) => {
                json_payload::orders_of_size(size, args.seed)
            }
            _ => json_payload::json_payload(
                kind,
                args.size.unwrap_or(1024),
                args.orders.unwrap_or(10),
                args.seed,
            ),
        }
        .map_err(BenchError::Usage)?;
        let mut out = std::io::stdout().lock();
        return out
            .write_all(&bytes)
            .and_then(|()| out.flush())
            .map_err(|e| BenchError::io("cannot write the payload to stdout", e));
    }
    let size = match args.orders {
        Some(n) => size_for_orders(n, args.variant).map_err(BenchError::Usage)?,
        None => args.size.unwrap_or(1024),
    };
    let bytes = buy_stocks(size, args.variant).map_err(|e| BenchError::Usage(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("cannot write the payload to stdout", e))
}

/// Writes pretty JSON with a trailing newline (stable field order, stable to diff).
pub fn write_json<T: serde::Serialize>(
    path: &std::path::Path,
    value: &T,
) -> Result<(), BenchError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| BenchError::Failed(format!("cannot serialize {}: {e}", path.display())))?;
    text.push('\n');
    std::fs::write(path, text)
        .map_err(|e| BenchError::io(format!("cannot write {}", path.display()), e))
}
