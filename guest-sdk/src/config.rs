//! The operator's configuration: the job's `[operators.config]` as key/value pairs.
//!
//! Lookups that fail say which key, what it held and what was expected, so that the
//! job's owner can fix the job file from the message alone.

use std::str::FromStr;

use crate::error::Error;

/// Configuration pairs handed to [`Operator::init`](crate::Operator::init).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pairs: Vec<(String, String)>,
}

impl Config {
    /// The configuration made of these pairs; a key given twice keeps its first value.
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self { pairs }
    }

    /// Builds a configuration from borrowed pairs, e.g. `Config::from_pairs([("window_ms", "1000")])`.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self::new(
            pairs
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect(),
        )
    }

    /// The raw value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// Every pair, in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Parses `key` if it is set; `expected` describes a valid value for the error,
    /// e.g. `"a positive integer of milliseconds"`.
    pub fn parse<T: FromStr>(&self, key: &str, expected: &str) -> Result<Option<T>, Error> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        raw.trim().parse().map(Some).map_err(|_| {
            Error::new(format!(
                "operator config `{key}` = {raw:?} is not valid: expected {expected}"
            ))
        })
    }

    /// Parses `key`, which must be set.
    pub fn require<T: FromStr>(&self, key: &str, expected: &str) -> Result<T, Error> {
        self.parse(key, expected)?.ok_or_else(|| {
            Error::new(format!(
                "operator config `{key}` is missing: set it to {expected} under [operators.config]"
            ))
        })
    }

    /// Fails on the first key not in `known`, to catch a misspelt key instead of
    /// silently running with a default.
    pub fn deny_unknown(&self, known: &[&str]) -> Result<(), Error> {
        match self
            .pairs
            .iter()
            .find(|(key, _)| !known.contains(&key.as_str()))
        {
            None => Ok(()),
            Some((key, _)) => Err(Error::new(format!(
                "operator config has unknown key `{key}`; this operator knows: {}",
                if known.is_empty() {
                    "no keys".to_owned()
                } else {
                    known.join(", ")
                }
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_the_key_on_error() {
        let config = Config::from_pairs([("size", " 12 "), ("name", "x")]);
        assert_eq!(config.require::<u32>("size", "a count").unwrap(), 12);
        assert_eq!(config.parse::<u32>("absent", "a count").unwrap(), None);
        let error = config.require::<u32>("name", "a count").unwrap_err();
        assert_eq!(
            error.message(),
            "operator config `name` = \"x\" is not valid: expected a count"
        );
        let error = config.require::<u32>("absent", "a count").unwrap_err();
        assert!(
            error
                .message()
                .starts_with("operator config `absent` is missing")
        );
        assert!(config.deny_unknown(&["size", "name"]).is_ok());
        let error = config.deny_unknown(&["size"]).unwrap_err();
        assert_eq!(
            error.message(),
            "operator config has unknown key `name`; this operator knows: size"
        );
    }
}
