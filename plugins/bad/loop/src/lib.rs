//! Test plugin for the CPU deadline: `process` never returns, whatever the batch.
//! `init`, `snapshot` and `restore` work, so only the deadline can stop it.

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct Loop;

impl Operator for Loop {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        Ok((Loop, ()))
    }

    fn process(&mut self, _: &mut (), _: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
        let mut spins = 0u64;
        loop {
            // black_box keeps the loop from being optimised into anything cheaper.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

weir_guest::export_operator!(Loop);
