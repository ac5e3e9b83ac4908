//! The operator's configuration: the job's `[operators.config]` as key/value pairs, and
//! the names of the operator's inputs and outputs in the job graph.
//!
//! Lookups that fail say which key, input or output, what it held and what was
//! expected, so that the job's owner can fix the job file from the message alone.

use std::str::FromStr;

use crate::error::Error;
use crate::ports::{Input, Output, Ports};

/// Configuration pairs and port names handed to [`Operator::init`](crate::Operator::init).
///
/// A configuration built natively ([`Config::new`], [`Config::from_pairs`]) has one
/// input, `in`, and one output, `out`, until [`with_inputs`](Config::with_inputs)
/// and [`with_outputs`](Config::with_outputs) name others.
///
/// ```
/// use weir_guest::{Config, Output};
///
/// let config = Config::from_pairs([("bound_ms", "500")])
///     .with_inputs(["clicks", "users"])
///     .with_outputs(["enriched", "late"]);
/// let users = config.input("users")?;
/// assert_eq!(users.index(), 1);
/// assert_eq!(config.find_output("late").map(Output::index), Some(1));
/// assert_eq!(
///     config.input("orders").unwrap_err().message(),
///     "operator needs an input named `orders`; its inputs are [clicks, users]: name one \
///      `orders` in the operator's `inputs` in the job file"
/// );
/// # Ok::<(), weir_guest::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pairs: Vec<(String, String)>,
    ports: Ports,
}

impl Config {
    /// The configuration made of these pairs; a key given twice keeps its first value.
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self {
            pairs,
            ports: Ports::default(),
        }
    }

    /// The same configuration with these inputs, in order (as the job file lists them).
    pub fn with_inputs<S: Into<String>>(mut self, inputs: impl IntoIterator<Item = S>) -> Self {
        self.ports.inputs = inputs.into_iter().map(Into::into).collect();
        self
    }

    /// The same configuration with these outputs, in order (as the job file lists them).
    pub fn with_outputs<S: Into<String>>(mut self, outputs: impl IntoIterator<Item = S>) -> Self {
        self.ports.outputs = outputs.into_iter().map(Into::into).collect();
        self
    }

    /// The names of the operator's inputs, in order: [`Input::index`] indexes them.
    pub fn inputs(&self) -> &[String] {
        &self.ports.inputs
    }

    /// The names of the operator's outputs, in order: [`Output::index`] indexes them.
    pub fn outputs(&self) -> &[String] {
        &self.ports.outputs
    }

    /// The input named `name`; an error for `init` to return if there is none, naming
    /// it and the inputs there are.
    pub fn input(&self, name: &str) -> Result<Input, Error> {
        self.ports.input(name)
    }

    /// The output named `name`; an error for `init` to return if there is none, naming
    /// it and the outputs there are.
    pub fn output(&self, name: &str) -> Result<Output, Error> {
        self.ports.output(name)
    }

    /// The input named `name`, if the operator has one: for an optional input.
    pub fn find_input(&self, name: &str) -> Option<Input> {
        self.ports.find_input(name)
    }

    /// The output named `name`, if the operator has one: for an optional output (a
    /// `late` or `invalid` output, say).
    pub fn find_output(&self, name: &str) -> Option<Output> {
        self.ports.find_output(name)
    }

    /// Every output with its name, in order.
    pub fn output_ports(&self) -> impl Iterator<Item = (Output, &str)> {
        self.ports.output_ports()
    }

    /// Fails on the first input not in `known`: an operator that reads only some
    /// inputs refuses a job that gives it another, instead of ignoring its records.
    pub fn deny_unknown_inputs(&self, known: &[&str]) -> Result<(), Error> {
        self.ports.deny_unknown_inputs(known)
    }

    pub(crate) fn ports(&self) -> &Ports {
        &self.ports
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
