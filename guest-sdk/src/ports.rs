//! An operator's inputs and outputs in a job graph: their names, given to `init` in the
//! job file's order, and the indexes that batches and emitted records carry.
//!
//! [`Input`] and [`Output`] come only from the [`Config`](crate::Config) that names
//! them, so an index an operator holds is always one the host gave it.

use std::fmt;

use crate::error::Error;

/// The most outputs an operator can have: the WIT gives each record's output as a `u8`.
pub const MAX_OUTPUTS: usize = 256;

/// One of the operator's inputs: which one a batch came from ([`Records::input`]).
///
/// [`Records::input`]: crate::Records::input
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Input(u32);

impl Input {
    /// The first input: the only one of an operator with one input.
    pub const FIRST: Input = Input(0);

    pub(crate) fn new(index: u32) -> Self {
        Self(index)
    }

    /// Its index in the names [`Config::inputs`](crate::Config::inputs) lists.
    pub fn index(self) -> u32 {
        self.0
    }
}

/// One of the operator's outputs, to emit to ([`Emitter::emit_to`]).
///
/// [`Emitter::emit_to`]: crate::Emitter::emit_to
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Output(u8);

impl Output {
    /// The first output, where [`Emitter::emit`](crate::Emitter::emit) sends records.
    pub const FIRST: Output = Output(0);

    /// Its index in the names [`Config::outputs`](crate::Config::outputs) lists.
    pub fn index(self) -> u8 {
        self.0
    }
}

/// The names of an operator's inputs and outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ports {
    pub(crate) inputs: Vec<String>,
    pub(crate) outputs: Vec<String>,
}

/// What a natively built [`Config`](crate::Config) names its one input and output
/// (`out` is also the job file's default output).
pub(crate) const DEFAULT_INPUT: &str = "in";
pub(crate) const DEFAULT_OUTPUT: &str = "out";

impl Default for Ports {
    fn default() -> Self {
        Self {
            inputs: vec![DEFAULT_INPUT.to_owned()],
            outputs: vec![DEFAULT_OUTPUT.to_owned()],
        }
    }
}

impl Ports {
    /// Checks what the host must give: at least one input and one output, and no more
    /// outputs than a record can name.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.inputs.is_empty() || self.outputs.is_empty() {
            return Err(Error::new(format!(
                "an operator needs at least one input and one output, but was given inputs {} \
                 and outputs {}",
                Names(&self.inputs),
                Names(&self.outputs)
            )));
        }
        if self.outputs.len() > MAX_OUTPUTS {
            return Err(Error::new(format!(
                "an operator has at most {MAX_OUTPUTS} outputs, but was given {}",
                self.outputs.len()
            )));
        }
        Ok(())
    }

    pub(crate) fn find_input(&self, name: &str) -> Option<Input> {
        let index = self.inputs.iter().position(|input| input == name)?;
        Some(Input(index as u32))
    }

    pub(crate) fn find_output(&self, name: &str) -> Option<Output> {
        let index = self.outputs.iter().position(|output| output == name)?;
        // `check` keeps the outputs within u8; natively built configs are checked by
        // the Runner's `init` too, so an index past 255 is never handed out.
        Some(Output(u8::try_from(index).ok()?))
    }

    pub(crate) fn output_ports(&self) -> impl Iterator<Item = (Output, &str)> {
        (0..=u8::MAX)
            .zip(&self.outputs)
            .map(|(index, name)| (Output(index), name.as_str()))
    }

    pub(crate) fn input(&self, name: &str) -> Result<Input, Error> {
        self.find_input(name).ok_or_else(|| {
            Error::new(format!(
                "operator needs an input named `{name}`; its inputs are {}: name one `{name}` in \
                 the operator's `inputs` in the job file",
                Names(&self.inputs)
            ))
        })
    }

    pub(crate) fn output(&self, name: &str) -> Result<Output, Error> {
        self.find_output(name).ok_or_else(|| {
            Error::new(format!(
                "operator needs an output named `{name}`; its outputs are {}: name one `{name}` \
                 in the operator's `outputs` in the job file",
                Names(&self.outputs)
            ))
        })
    }

    pub(crate) fn deny_unknown_inputs(&self, known: &[&str]) -> Result<(), Error> {
        match self
            .inputs
            .iter()
            .find(|input| !known.contains(&input.as_str()))
        {
            None => Ok(()),
            Some(input) => Err(Error::new(format!(
                "operator was given an input named `{input}` it does not read; its inputs must \
                 be among [{}]",
                known.join(", ")
            ))),
        }
    }
}

/// Names as the errors list them: `[a, b]`.
pub(crate) struct Names<'a>(pub(crate) &'a [String]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0.join(", "))
    }
}
