//! The bench kit as a stand-alone program (what `busbar bench ...` runs), for measuring the
//! load generator itself: `cargo run --release --example bench -- load URL -c 20 -d 10s`.

use std::process::ExitCode;

fn main() -> ExitCode {
    match busbar_bench::parse_args(std::env::args_os()) {
        Ok(cmd) => busbar_bench::run(cmd),
        Err(e) => {
            // clap prints help/version to stdout with exit code 0, usage errors with 2.
            let _ = e.print();
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
        }
    }
}
