//! Test plugin for traps and poison records: passes every record through unchanged,
//! except that a record whose value starts with `poison` makes it panic, which traps
//! the instance. Stateless; accepts any config.

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct Trap;

impl Operator for Trap {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        Ok((Trap, ()))
    }

    fn process(
        &mut self,
        _: &mut (),
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            if record.value.starts_with(b"poison") {
                panic!("bad-trap: poison record at timestamp {}", record.timestamp);
            }
            out.forward(&record);
        }
        Ok(())
    }
}

weir_guest::export_operator!(Trap);
