//! Logging through the host, the one capability every plugin is granted.
//!
//! In Wasm a line goes to the host's log, tagged with the plugin and subtask; natively
//! (benchmarks, tests) it goes to standard error.

use std::fmt;

/// How much a log line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Step-by-step detail, off unless the host asks for it.
    Trace,
    /// Detail for whoever debugs the operator.
    Debug,
    /// What the operator does, in normal operation.
    Info,
    /// Something unexpected that the operator handled.
    Warn,
    /// Something that failed.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        })
    }
}

/// Writes one line to the host's log. Prefer the [`info!`](crate::info) family of macros.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    crate::glue::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("{level} {message}");
}

/// Logs a formatted line at trace level: `weir_guest::trace!("x = {x}")`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Logs a formatted line at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
