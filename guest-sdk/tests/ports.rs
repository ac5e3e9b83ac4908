//! The ports of a job graph's operator through the native Runner, as the glue calls it:
//! the names `init` gets, the input a batch came from, the output each record goes to,
//! and the checks at the boundary (ports the host must give, indexes it must accept).

use weir_guest::{Config, Emitter, Error, Input, Operator, Output, Record, Records, Runner};

/// Passes every record on: to `copies` and the first output both when it came from
/// `second`, else to the first output only; a value `late` goes to `late` if there is one.
struct Fork {
    second: Option<Input>,
    copies: Option<Output>,
    late: Option<Output>,
}

impl Operator for Fork {
    type State = ();

    fn init(config: &Config) -> Result<(Self, ()), Error> {
        let fork = Fork {
            second: config.find_input("second"),
            copies: config.find_output("copies"),
            late: config.find_output("late"),
        };
        Ok((fork, ()))
    }

    fn process(
        &mut self,
        _: &mut (),
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            if let Some(late) = self.late.filter(|_| record.value == b"late") {
                out.forward_to(late, &record);
                continue;
            }
            out.forward(&record);
            if let Some(copies) = self.copies.filter(|_| Some(records.input()) == self.second) {
                out.emit_with_to(copies, record.key, record.timestamp, |value| {
                    value.extend(b"copy of ");
                    value.extend(record.value);
                });
            }
        }
        Ok(())
    }
}

fn record(value: &str) -> Record<'_> {
    Record::new(Some(b"k"), value.as_bytes(), 1)
}

fn values_and_outputs(
    runner: &Runner<Fork>,
    out: &[weir_guest::OwnedRecord],
) -> Vec<(String, String)> {
    out.iter()
        .map(|r| {
            let output = runner.outputs()[r.output as usize].clone();
            (String::from_utf8(r.value.clone()).unwrap(), output)
        })
        .collect()
}

#[test]
fn an_operator_that_ignores_ports_has_one_input_and_one_output() {
    let mut runner = Runner::<Fork>::init(Config::default()).unwrap();
    assert_eq!(runner.inputs(), ["in"]);
    assert_eq!(runner.outputs(), ["out"]);
    let batch = weir_guest::packed::Batch::pack(&[record("a"), record("late")]);
    let emitted = runner.process_from(0, &batch).unwrap();
    assert_eq!(emitted.batch.len(), 2);
    assert!(
        emitted.outputs.is_empty(),
        "everything to the first output: no list"
    );
    assert_eq!(runner.process(&batch).unwrap(), emitted.batch);
}

#[test]
fn batches_say_their_input_and_records_go_to_their_outputs() {
    let config = Config::default()
        .with_inputs(["first", "second"])
        .with_outputs(["main", "copies", "late"]);
    let mut runner = Runner::<Fork>::init(config).unwrap();

    let out = runner.process_records_from(0, &[record("a")]).unwrap();
    assert_eq!(
        values_and_outputs(&runner, &out),
        [("a".into(), "main".into())]
    );

    let out = runner
        .process_records_from(1, &[record("b"), record("late"), record("c")])
        .unwrap();
    let expected = [
        ("b", "main"),
        ("copy of b", "copies"),
        ("late", "late"),
        ("c", "main"),
        ("copy of c", "copies"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(v, o)| (v.to_string(), o.to_string()))
        .collect();
    assert_eq!(values_and_outputs(&runner, &out), expected);

    // process_records is the first input.
    let out = runner.process_records(&[record("d")]).unwrap();
    assert_eq!(
        values_and_outputs(&runner, &out),
        [("d".into(), "main".into())]
    );
}

#[test]
fn a_batch_of_an_input_the_operator_lacks_is_refused() {
    let config = Config::default().with_inputs(["only"]);
    let mut runner = Runner::<Fork>::init(config).unwrap();
    let error = runner.process_records_from(1, &[record("a")]).unwrap_err();
    assert_eq!(
        error.message(),
        "a batch came from input 1, but the operator has 1 inputs [only]"
    );
}

/// Emits every record to an output it was handed from another configuration.
struct Stray(Output);

impl Operator for Stray {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        let elsewhere = Config::default().with_outputs(["a", "b", "c"]);
        Ok((Stray(elsewhere.output("c")?), ()))
    }

    fn process(
        &mut self,
        _: &mut (),
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            out.forward_to(self.0, &record);
        }
        Ok(())
    }
}

#[test]
fn an_output_the_operator_lacks_is_refused_as_the_host_would() {
    let mut runner = Runner::<Stray>::init(Config::default().with_outputs(["x", "y"])).unwrap();
    let error = runner.process_records(&[record("a")]).unwrap_err();
    assert!(
        error
            .message()
            .starts_with("emitted record 0 to output 2, but the operator has 2 outputs [x, y]"),
        "{error}"
    );
}

/// Needs inputs `clicks` and `users` and an output `enriched`, and nothing else.
struct Strict;

impl Operator for Strict {
    type State = ();

    fn init(config: &Config) -> Result<(Self, ()), Error> {
        config.deny_unknown_inputs(&["clicks", "users"])?;
        config.input("clicks")?;
        config.input("users")?;
        config.output("enriched")?;
        Ok((Strict, ()))
    }

    fn process(&mut self, _: &mut (), _: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
        Ok(())
    }
}

fn init_error(inputs: &[&str], outputs: &[&str]) -> String {
    let config = Config::default()
        .with_inputs(inputs.iter().copied())
        .with_outputs(outputs.iter().copied());
    match Runner::<Strict>::init(config) {
        Ok(_) => String::new(),
        Err(error) => error.message().to_owned(),
    }
}

#[test]
fn init_names_the_missing_port_and_the_ports_there_are() {
    assert_eq!(init_error(&["clicks", "users"], &["enriched"]), "");
    assert_eq!(
        init_error(&["clicks"], &["enriched"]),
        "operator needs an input named `users`; its inputs are [clicks]: name one `users` in \
         the operator's `inputs` in the job file"
    );
    assert_eq!(
        init_error(&["clicks", "users"], &["out"]),
        "operator needs an output named `enriched`; its outputs are [out]: name one `enriched` \
         in the operator's `outputs` in the job file"
    );
    assert_eq!(
        init_error(&["clicks", "users", "orders"], &["enriched"]),
        "operator was given an input named `orders` it does not read; its inputs must be among \
         [clicks, users]"
    );
}

#[test]
fn the_host_must_give_an_input_an_output_and_at_most_256_outputs() {
    assert!(
        init_error(&[], &["enriched"])
            .starts_with("an operator needs at least one input and one output")
    );
    assert!(init_error(&["clicks", "users"], &[]).contains("outputs []"));
    let many: Vec<String> = (0..257).map(|i| format!("o{i}")).collect();
    let config = Config::default().with_outputs(many.iter().map(String::as_str));
    let error = Runner::<Fork>::init(config).err().unwrap();
    assert_eq!(
        error.message(),
        "an operator has at most 256 outputs, but was given 257"
    );
    let most: Vec<String> = (0..256).map(|i| format!("o{i}")).collect();
    let config = Config::default().with_outputs(most.iter().map(String::as_str));
    assert_eq!(config.output("o255").unwrap().index(), 255);
    assert_eq!(config.output_ports().count(), 256);
    Runner::<Fork>::init(config).unwrap();
}
