//! The `weir` command line: argument parsing and one module per subcommand.
//! Each subcommand returns `anyhow::Result`; `main` prints the error chain.

mod check;
mod new;
mod run;
mod snapshot_file;
mod status;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Exactly-once stream processing from Kafka through WebAssembly operators to Kafka"
)]
pub(crate) struct Cli {
    /// How log lines are written to stderr: `text` for people, `json` (one object per
    /// line: timestamp, level, target, the event's fields) for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// `--log-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Load and validate a plugin, instantiate it once and print what it is and
    /// the limits it would run under.
    // Boxed: its flags outweigh the other commands' many times over.
    Check(Box<check::CheckArgs>),
    /// Run a job exactly-once until SIGTERM/SIGINT (which commits a final checkpoint).
    Run(run::RunArgs),
    /// Write a plugin skeleton in one language, with a job file, into plugins/NAME:
    /// it builds with `scripts/build-plugins NAME` and passes `weir check` as it stands.
    New(new::NewArgs),
    /// Show a running job's status (graph, checkpoints, lag, watermarks, restarts) from
    /// its status address, for a terminal without a browser.
    Status(status::StatusArgs),
}

impl Cli {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Check(args) => check::run(*args),
            Command::Run(args) => run::run(args),
            Command::New(args) => new::run(args),
            Command::Status(args) => status::run(args),
        }
    }
}

/// `text` with every control character but the line ends, and every character that
/// reorders or hides text (bidi marks and overrides, zero-width and invisible ones),
/// shown as an escape: failure messages can quote records, and an answer of `weir
/// status` comes from whatever listens at the address; neither may drive or disguise
/// the terminal.
pub(crate) fn printable(text: &str) -> String {
    let hidden = |c: char| {
        matches!(c, '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
    };
    text.chars()
        .map(|c| if (c.is_control() && c != '\n') || hidden(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_shown_not_sent_to_the_terminal() {
        assert_eq!(printable("trap: \u{1b}[2Jgone\r\nnext\n"), "trap: \\u{1b}[2Jgone\\u{d}\nnext\n");
        assert_eq!(printable("a\u{202e}cba"), "a\\u{202e}cba");
        assert_eq!(printable("x\u{61c}\u{2061}y"), "x\\u{61c}\\u{2061}y");
    }
}
