//! The `busbar` command: `run`, `validate`, `echo` and `bench`.
//!
//! Layout: this file parses the command line, sets up logging and signals, and hands over to
//! `busbar-engine` (run, validate, echo) and `busbar-bench` (bench).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use busbar_engine::echo::EchoOptions;
use clap::{Parser, Subcommand};

#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// busbar: a fast, exact integration engine (ESB) and its benchmark kit.
#[derive(Parser, Debug)]
#[command(name = "busbar", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the proxies of a config file.
    Run {
        /// The YAML config file.
        config: PathBuf,
    },
    /// Load, validate and build a config without serving; prints every problem.
    Validate {
        /// The YAML config file.
        config: PathBuf,
    },
    /// The benchmark back end: echoes each request body with its Content-Type.
    Echo {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: SocketAddr,
        /// Wait this many milliseconds before each answer.
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// Answer every request with this JSON file's content instead of echoing.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Add `x-echo-name: NAME` to every response (to see which instance answered).
        #[arg(long)]
        name: Option<String>,
        /// Worker threads (default: one per available core).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// The benchmark kit: payloads, load, verification, scenario matrix, reports.
    Bench {
        #[command(subcommand)]
        command: busbar_bench::BenchCommand,
    },
}

fn init_logging(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Validate { config } => validate(&config),
        Command::Run { config } => run(&config),
        Command::Echo {
            listen,
            delay_ms,
            json,
            name,
            workers,
        } => echo(listen, delay_ms, json, name, workers),
        Command::Bench { command } => busbar_bench::run(command),
    }
}

fn validate(config: &std::path::Path) -> ExitCode {
    match busbar_engine::engine::check(config) {
        Ok(rt) => {
            let c = &rt.config.config;
            println!(
                "{}: valid ({} listeners, {} endpoints, {} sequences, {} proxies)",
                config.display(),
                c.listeners.len(),
                c.endpoints.len(),
                c.sequences.len(),
                c.proxies.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            eprintln!("{}: {} problem(s)", config.display(), errors.0.len());
            ExitCode::FAILURE
        }
    }
}

fn run(config: &std::path::Path) -> ExitCode {
    // Log settings come from the config, but a broken config must still be reported: read the
    // log section leniently first.
    let (level, json) = match busbar_config::load(config) {
        Ok(l) => (
            l.config.log.level.clone(),
            l.config.log.format == busbar_config::LogFormat::Json,
        ),
        Err(_) => ("info".to_owned(), false),
    };
    init_logging(&level, json);
    let engine = match busbar_engine::Engine::start(config) {
        Ok(e) => e,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    for (name, addr) in &engine.listeners {
        println!("listener {name} on http://{addr}");
    }
    if let Some(a) = engine.echo {
        println!("echo back end on http://{a}");
    }
    for (name, a) in &engine.echoes {
        println!("echo back end {name} on http://{a}");
    }
    if let Some(a) = engine.admin {
        println!("admin on http://{a}");
    }
    let control = engine.control();
    spawn_signal_thread(control);
    engine.wait();
    ExitCode::SUCCESS
}

/// SIGTERM/SIGINT start a graceful shutdown; SIGHUP reloads the config.
fn spawn_signal_thread(control: Arc<busbar_engine::engine::Control>) {
    let spawned = std::thread::Builder::new()
        .name("busbar-signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot watch signals");
                    return;
                }
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::hangup()),
                ) else {
                    tracing::error!("cannot install signal handlers");
                    return;
                };
                loop {
                    tokio::select! {
                        _ = term.recv() => { control.shutdown(); return; }
                        _ = int.recv() => { control.shutdown(); return; }
                        _ = hup.recv() => { let _ = control.reload(); }
                    }
                }
            });
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the signal thread");
    }
}

fn echo(
    listen: SocketAddr,
    delay_ms: u64,
    json: Option<PathBuf>,
    name: Option<String>,
    workers: Option<usize>,
) -> ExitCode {
    init_logging("info", false);
    let json = match json {
        Some(path) => match std::fs::read(&path) {
            Ok(b) => Some(bytes::Bytes::from(b)),
            Err(e) => {
                eprintln!("{}: cannot read: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let name = match name.map(|n| http::HeaderValue::from_str(&n).map_err(|_| n)) {
        Some(Ok(v)) => Some(v),
        Some(Err(n)) => {
            eprintln!("--name '{n}' is not a valid header value");
            return ExitCode::from(2);
        }
        None => None,
    };
    let opts = EchoOptions {
        delay: (delay_ms > 0).then(|| std::time::Duration::from_millis(delay_ms)),
        json,
        name,
    };
    let workers =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    match busbar_engine::echo::start(listen, opts, workers) {
        Ok(server) => {
            println!("echo on http://{}", server.addr);
            spawn_echo_signals(server.stopper());
            server.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot listen on {listen}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn spawn_echo_signals(stop: busbar_engine::echo::Stopper) {
    let _ = std::thread::Builder::new()
        .name("busbar-signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let (Ok(mut term), Ok(mut int)) = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                ) else {
                    return;
                };
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
                stop.stop();
            });
        });
}
