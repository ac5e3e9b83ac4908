//! The `weir` binary: sets up logging to stderr (text, or JSON lines with
//! `--log-format json`), then hands the command line to `cli`. Errors end here, printed
//! as one paragraph (or one JSON line) with a non-zero exit.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use cli::LogFormat;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let format = cli.log_format;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter);
    match format {
        // Colour only on a terminal: logs redirected to files stay plain text.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
    match cli.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if format == LogFormat::Json => {
            tracing::error!(error = %format!("{err:#}"), "weir stopped");
            ExitCode::FAILURE
        }
        Err(err) => {
            // The chain can quote what a server answered or a file held.
            eprintln!("error: {}", cli::printable(&format!("{err:#}")));
            ExitCode::FAILURE
        }
    }
}
