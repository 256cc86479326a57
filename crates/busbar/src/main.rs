//! The `busbar` command: `run`, `validate`, `echo`, `bench` and `bpel test`.
//!
//! Layout: this file parses the command line, sets up logging and signals, and hands over to
//! `busbar-engine` (run, validate, echo), `busbar-bench` (bench) and `busbar-flow` (bpel).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use busbar_engine::echo::EchoOptions;
use clap::{Parser, Subcommand};

#[cfg(target_os = "linux")]
mod health;
mod logline;
mod notify;

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The version with the commit the binary was built from.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("BUSBAR_COMMIT"), ")");

/// busbar: a fast, exact integration engine (ESB) and its benchmark kit.
#[derive(Parser, Debug)]
#[command(name = "busbar", version = VERSION, about)]
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
    /// Ask a running engine's admin API whether it is healthy: exit status 0 when the URL
    /// answers 2xx within the timeout, 1 otherwise, 2 for a URL that is not http:// (for
    /// container health checks and scripts).
    Health {
        /// The admin health URL (plain HTTP).
        #[arg(default_value = "http://127.0.0.1:9901/healthz")]
        url: String,
        /// How long to wait for the answer.
        #[arg(long, default_value = "3s", value_parser = parse_timeout)]
        timeout: std::time::Duration,
    },
    /// WS-BPEL processes.
    Bpel {
        #[command(subcommand)]
        command: BpelCommand,
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
        /// Answer `GET /stock/ID`, `/price/ID` and `/reviews/ID` with small JSON naming the id.
        #[arg(long)]
        catalog: bool,
        /// Read each whole request before answering (for clients that stop sending when the
        /// answer starts early, such as Apache Synapse 2.1); bodies up to 64 MiB.
        #[arg(long)]
        buffer: bool,
    },
    /// The benchmark kit: payloads, load, verification, scenario matrix, reports.
    Bench {
        #[command(subcommand)]
        command: busbar_bench::BenchCommand,
    },
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    busbar_config::units::Duration::parse(s).map(|d| d.0)
}

/// Starts logging at `level` (or RUST_LOG's filter) in text or JSON. Returns what a reload
/// calls to change the level, unless RUST_LOG holds it.
fn init_logging(level: &str, json: bool) -> Option<busbar_engine::engine::LogLevelSetter> {
    // A RUST_LOG that is not a filter (a misspelt level is taken as a target name) would turn
    // every line off: it is ignored, and said so.
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| {
        if v.trim().is_empty() {
            return false;
        }
        let ok = busbar_config::check_log_filter(v);
        if let Err(e) = &ok {
            eprintln!("RUST_LOG: {e}; ignored, logging at '{level}'");
        }
        ok.is_ok()
    });
    let filter = tracing_subscriber::EnvFilter::try_new(from_env.as_deref().unwrap_or(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal (a log redirected to a file or a pipe gets plain text), and
    // never when NO_COLOR is set.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_ansi(ansi)
        .with_writer(logline::OneLine { ansi });
    let setter = if json {
        let builder = builder
            .json()
            .with_env_filter(filter)
            .with_filter_reloading();
        let handle = builder.reload_handle();
        builder.try_init().ok().map(|()| level_setter(handle))
    } else {
        let builder = builder.with_env_filter(filter).with_filter_reloading();
        let handle = builder.reload_handle();
        builder.try_init().ok().map(|()| level_setter(handle))
    };
    setter.filter(|_| from_env.is_none())
}

/// Sets the log filter through `handle` to a `log.level` the config check accepted.
fn level_setter<S: 'static>(
    handle: tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, S>,
) -> busbar_engine::engine::LogLevelSetter {
    busbar_engine::engine::LogLevelSetter(Box::new(move |level| {
        let filter = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    }))
}

#[derive(Subcommand, Debug)]
enum BpelCommand {
    /// Run every process test folder found under the given folders (a folder with
    /// `deploy.xml`, its processes and `test*.properties` in Apache ODE's format) against an
    /// in-process engine with the ProbeService and FaultService partners; one line per test,
    /// then `N passed, N failed, N skipped`. Exit status 1 on any failure.
    Test {
        /// Folders to search for tests.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
}

fn bpel_test(dirs: Vec<PathBuf>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    for d in &dirs {
        if !d.is_dir() {
            eprintln!("error: {} is not a folder", d.display());
            return ExitCode::from(2);
        }
    }
    let ((passed, failed, skipped), _) = rt
        .block_on(busbar_flow::harness::run_all(&dirs, |line| {
            println!("{line}")
        }));
    if passed + failed + skipped == 0 {
        eprintln!("error: no test folder (one with deploy.xml) under the folders given");
        return ExitCode::FAILURE;
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
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
            catalog,
            buffer,
        } => echo(listen, delay_ms, json, name, workers, (catalog, buffer)),
        Command::Bench { command } => busbar_bench::run(command),
        Command::Bpel {
            command: BpelCommand::Test { dirs },
        } => bpel_test(dirs),
        Command::Health { url, timeout } => health::check(&url, timeout),
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
            for x in &rt.engines {
                match &x.fast {
                    Ok(()) => println!("{}: {} runs on the fast path", x.step, x.subject),
                    Err(why) => println!(
                        "{}: {} runs on {} (outside the fast path's class: {why})",
                        x.step, x.subject, x.general
                    ),
                }
            }
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
    let (level, json, access_on_stdout) = match busbar_config::load(config) {
        Ok(l) => (
            l.config.log.level.clone(),
            l.config.log.format == busbar_config::LogFormat::Json,
            l.config
                .access_log
                .as_ref()
                .is_some_and(|a| matches!(a.path.as_str(), "stdout" | "-")),
        ),
        Err(_) => ("info".to_owned(), false, false),
    };
    let log_level = init_logging(&level, json);
    let signals = watch_signals();
    let engine = match busbar_engine::Engine::start(config) {
        Ok(e) => e,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(set) = log_level {
        engine.control().on_log_level(set);
    }
    // The addresses go to standard output, unless the access log does: then its lines are all
    // that is there, for whatever reads them.
    let mut addresses = Vec::new();
    for (name, addr) in &engine.listeners {
        addresses.push(format!("listener {name} on http://{addr}"));
    }
    if let Some(a) = engine.echo {
        addresses.push(format!("echo back end on http://{a}"));
    }
    for (name, a) in &engine.echoes {
        addresses.push(format!("echo back end {name} on http://{a}"));
    }
    if let Some(a) = engine.admin {
        addresses.push(format!("admin on http://{a}"));
    }
    for line in addresses {
        if access_on_stdout {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    notify::notify("READY=1");
    let control = engine.control();
    forward_signals(signals, control.clone());
    engine.wait();
    match control.failure() {
        Some(why) => {
            eprintln!("busbar: {why}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

/// A signal the process acts on.
enum Signal {
    /// SIGTERM or SIGINT: stop gracefully.
    Stop,
    /// SIGHUP: reload the config.
    Reload,
    /// SIGUSR1: reopen the access log (after logrotate moved it).
    Reopen,
}

/// Installs the SIGTERM, SIGINT, SIGHUP and SIGUSR1 handlers on a thread of their own and returns once
/// they are in place, so that a signal sent while the engine starts (a supervisor that stops
/// it at once) is not lost to the default action, which would kill the process. The signals
/// arrive on the returned channel.
fn watch_signals() -> std::sync::mpsc::Receiver<Signal> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<()>(1);
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
                    let _ = ready_tx.send(());
                    return;
                }
            };
            rt.block_on(async move {
                use tokio::signal::unix::{signal, SignalKind};
                let handlers = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::hangup()),
                    signal(SignalKind::user_defined1()),
                );
                let _ = ready_tx.send(());
                let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1)) = handlers else {
                    tracing::error!("cannot install signal handlers");
                    return;
                };
                loop {
                    let signal = tokio::select! {
                        _ = term.recv() => Signal::Stop,
                        _ = int.recv() => Signal::Stop,
                        _ = hup.recv() => Signal::Reload,
                        _ = usr1.recv() => Signal::Reopen,
                    };
                    if tx.send(signal).is_err() {
                        return;
                    }
                }
            });
        });
    match spawned {
        Ok(_) => {
            let _ = ready_rx.recv();
        }
        Err(e) => tracing::error!(error = %e, "cannot start the signal thread"),
    }
    rx
}

/// Acts on `signals` for a started engine: SIGTERM/SIGINT start a graceful shutdown; SIGHUP
/// reloads the config; SIGUSR1 reopens the access log.
fn forward_signals(
    signals: std::sync::mpsc::Receiver<Signal>,
    control: Arc<busbar_engine::engine::Control>,
) {
    let spawned = std::thread::Builder::new()
        .name("busbar-control".into())
        .spawn(move || {
            for signal in signals {
                match signal {
                    Signal::Stop => {
                        notify::notify("STOPPING=1");
                        control.shutdown();
                        return;
                    }
                    Signal::Reload => {
                        notify::notify("RELOADING=1");
                        let status = match control.reload() {
                            Ok(_) => "READY=1\nSTATUS=serving; last reload applied".to_owned(),
                            Err(e) => format!(
                                "READY=1\nSTATUS=serving the previous config; reload failed with {} problem(s)",
                                e.0.len()
                            ),
                        };
                        notify::notify(&status);
                    }
                    Signal::Reopen => control.reopen_logs(),
                }
            }
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
    (catalog, buffer): (bool, bool),
) -> ExitCode {
    let _ = init_logging("info", false);
    let json = match json {
        Some(path) => match busbar_core::file::read(&path) {
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
        catalog,
        buffer,
    };
    let workers =
        workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let signals = watch_signals();
    match busbar_engine::echo::start(listen, opts, workers) {
        Ok(server) => {
            println!("echo on http://{}", server.addr);
            let stop = server.stopper();
            let _ = std::thread::Builder::new()
                .name("busbar-control".into())
                .spawn(move || {
                    // Only a stop matters to the echo back end; a reload has nothing to do.
                    if signals.iter().any(|s| matches!(s, Signal::Stop)) {
                        stop.stop();
                    }
                });
            server.wait();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot listen on {listen}: {e}");
            ExitCode::FAILURE
        }
    }
}
