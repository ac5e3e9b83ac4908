//! An operator's place in a job graph: the inputs it reads and the outputs it writes
//! ([`Ports`]), and what one call emits, each record tagged with its output
//! ([`Emitted`]), checked as it crosses from the guest like a batch is. A
//! weir:operator@0.2 operator has one input and one output.

use super::error::OutputsError;
use crate::batch::Batch;

/// Most outputs an operator may have: a record's output travels as a `u8`.
pub const MAX_OUTPUTS: usize = 1 << u8::BITS;

/// The names of an operator's inputs and outputs, in the job file's order; an input's
/// or output's index is its position here. A weir:operator@0.3 plugin's `init`
/// receives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ports {
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl Ports {
    /// One input `in` and one output `out`: an operator of a linear pipeline, and the
    /// only shape a weir:operator@0.2 plugin can take.
    pub fn single() -> Ports {
        Ports {
            inputs: vec!["in".to_owned()],
            outputs: vec!["out".to_owned()],
        }
    }

    /// Whether this is one input and one output, whatever their names.
    pub fn is_single(&self) -> bool {
        self.inputs.len() == 1 && self.outputs.len() == 1
    }

    /// Why no operator can have these ports (none of either, a name twice on one side,
    /// or more outputs than [`MAX_OUTPUTS`]), if so.
    pub(super) fn problem(&self) -> Option<String> {
        if self.inputs.is_empty() || self.outputs.is_empty() {
            return Some(format!(
                "an operator needs at least one input and one output, and this one has {}",
                self.describe()
            ));
        }
        if self.outputs.len() > MAX_OUTPUTS {
            return Some(format!(
                "an operator has at most {MAX_OUTPUTS} outputs, and this one has {}",
                self.outputs.len()
            ));
        }
        for (side, names) in [("inputs", &self.inputs), ("outputs", &self.outputs)] {
            if let Some(twice) = names.iter().enumerate().find_map(|(at, name)| names[..at].contains(name).then_some(name)) {
                return Some(format!("an operator's {side} need distinct names, and `{twice}` is there twice"));
            }
        }
        if u32::try_from(self.inputs.len()).is_err() {
            return Some(format!("{} inputs are more than an input index can name", self.inputs.len()));
        }
        None
    }

    /// `2 inputs (a, b) and 1 output (out)`.
    pub(super) fn describe(&self) -> String {
        let side = |names: &[String], one: &str, many: &str| {
            let noun = if names.len() == 1 { one } else { many };
            format!("{} {noun} ({})", names.len(), names.join(", "))
        };
        format!(
            "{} and {}",
            side(&self.inputs, "input", "inputs"),
            side(&self.outputs, "output", "outputs")
        )
    }
}

impl Default for Ports {
    fn default() -> Ports {
        Ports::single()
    }
}

/// What one call emitted: records, and the output each goes to (an index into the
/// instance's [`Ports::outputs`]). Checked as it crossed: every index is below the
/// number of outputs.
#[derive(Clone, Debug, Default)]
pub struct Emitted {
    batch: Batch,
    /// Empty: every record goes to output 0. Otherwise one per record.
    outputs: Vec<u8>,
}

impl Emitted {
    /// Checks a guest's `outputs` list against its records and `count`, the number of
    /// the operator's outputs (`wit/0.3/operator.wit`, `emitted`).
    pub(super) fn new(batch: Batch, outputs: Vec<u8>, count: usize) -> Result<Emitted, OutputsError> {
        if !outputs.is_empty() && outputs.len() != batch.len() {
            return Err(OutputsError::Length {
                records: batch.len(),
                outputs: outputs.len(),
            });
        }
        if let Some((index, &output)) = outputs
            .iter()
            .enumerate()
            .find(|&(_, &output)| usize::from(output) >= count)
        {
            return Err(OutputsError::OutOfRange { index, output, count });
        }
        Ok(Emitted { batch, outputs })
    }

    /// Every record of `batch` to output 0.
    pub fn single(batch: Batch) -> Emitted {
        Emitted {
            batch,
            outputs: Vec::new(),
        }
    }

    /// The output record `index` goes to.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn output_of(&self, index: usize) -> usize {
        assert!(index < self.batch.len(), "record {index} of {}", self.batch.len());
        self.outputs.get(index).map_or(0, |&output| usize::from(output))
    }

    /// The records, of every output, in the order the guest emitted them.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// The records, of every output, in the order the guest emitted them.
    pub fn into_batch(self) -> Batch {
        self.batch
    }

    /// The records split by output: element `o` holds those of output `o`, in the
    /// order the guest emitted them. When every record goes to one output, its batch
    /// is the emitted one, moved; otherwise each record is copied once.
    ///
    /// # Panics
    /// If a record goes to an output `>= count`: `count` must be the number of
    /// outputs of the instance that emitted this, which checked every index below it.
    pub fn into_outputs(self, count: usize) -> Vec<Batch> {
        let mut split: Vec<Batch> = (0..count).map(|_| Batch::new()).collect();
        if self.batch.is_empty() {
            return split;
        }
        let first = self.outputs.first().copied().unwrap_or(0);
        if self.outputs.iter().all(|&output| output == first) {
            split[usize::from(first)] = self.batch;
            return split;
        }
        // Sized first, so that no output's buffers grow record by record.
        let mut sizes = vec![(0usize, 0usize); count];
        for (record, &output) in self.batch.iter().zip(&self.outputs) {
            let size = &mut sizes[usize::from(output)];
            size.0 += 1;
            size.1 += record.key.map_or(0, <[u8]>::len) + record.value.len();
        }
        for (batch, (records, bytes)) in split.iter_mut().zip(sizes) {
            *batch = Batch::with_capacity(records, bytes);
        }
        for (record, &output) in self.batch.iter().zip(&self.outputs) {
            split[usize::from(output)].push_record(record);
        }
        split
    }

    /// How many records were emitted, over every output.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(values: &[&str]) -> Batch {
        let mut batch = Batch::new();
        for (at, value) in (0..).zip(values) {
            batch.push(Some(b"k"), value.as_bytes(), at, &[("h", b"v")]);
        }
        batch
    }

    fn values(batch: &Batch) -> Vec<String> {
        batch.iter().map(|r| String::from_utf8_lossy(r.value).into_owned()).collect()
    }

    #[test]
    fn records_split_by_output_in_order() {
        let emitted = Emitted::new(batch(&["a", "b", "c", "d"]), vec![1, 0, 1, 2], 3).unwrap();
        assert_eq!((0..4).map(|i| emitted.output_of(i)).collect::<Vec<_>>(), [1, 0, 1, 2]);
        let split = emitted.into_outputs(3);
        let split: Vec<Vec<String>> = split.iter().map(values).collect();
        assert_eq!(split, [vec!["b"], vec!["a", "c"], vec!["d"]]);
    }

    #[test]
    fn an_empty_list_sends_everything_to_the_first_output() {
        let emitted = Emitted::new(batch(&["a", "b"]), vec![], 2).unwrap();
        assert_eq!(emitted.output_of(1), 0);
        let split = emitted.into_outputs(2);
        assert_eq!(values(&split[0]), ["a", "b"]);
        assert!(split[1].is_empty());
        // One output for all: moved, headers and all.
        let split = Emitted::new(batch(&["a", "b"]), vec![1, 1], 2).unwrap().into_outputs(2);
        assert!(split[0].is_empty());
        assert_eq!(split[1].get(1).headers().collect::<Vec<_>>(), [("h", &b"v"[..])]);
    }

    #[test]
    fn malformed_lists_are_refused() {
        assert_eq!(
            Emitted::new(batch(&["a", "b"]), vec![0], 2).unwrap_err(),
            OutputsError::Length { records: 2, outputs: 1 }
        );
        assert_eq!(
            Emitted::new(batch(&[]), vec![0], 1).unwrap_err(),
            OutputsError::Length { records: 0, outputs: 1 }
        );
        assert_eq!(
            Emitted::new(batch(&["a", "b"]), vec![0, 2], 2).unwrap_err(),
            OutputsError::OutOfRange { index: 1, output: 2, count: 2 }
        );
    }

    #[test]
    fn ports_name_their_shape() {
        assert_eq!(Ports::single().describe(), "1 input (in) and 1 output (out)");
        let none = Ports { inputs: vec![], outputs: vec!["out".into()] };
        assert!(none.problem().unwrap().contains("at least one input"));
        let many = Ports { inputs: vec!["in".into()], outputs: (0..257).map(|o| o.to_string()).collect() };
        assert!(many.problem().unwrap().contains("at most 256"));
        let twice = Ports { inputs: vec!["a".into(), "b".into(), "a".into()], outputs: vec!["out".into()] };
        assert!(twice.problem().unwrap().contains("`a` is there twice"));
        assert_eq!(Ports::single().problem(), None);
    }
}
