//! The one error type of the SDK: a message for the host's log.
//!
//! Errors cross the component boundary as `result<_, string>`, so a message is all
//! there is; it should name what failed and what the job's owner can do about it.

use std::fmt;

/// An operator failure, reported by the host together with the plugin's name.
///
/// Build one from a message: `Error::new(format!("config `field`: ..."))`, or with
/// `?` on a `String` or `&str` error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    message: String,
}

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message, as the host will log it.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Prefixes the message with where it happened: `"{context}: {message}"`.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self {
            message: format!("{context}: {}", self.message),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self { message }
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

impl From<Error> for String {
    fn from(error: Error) -> Self {
        error.message
    }
}
