//! Test plugin for the memory cap: `process` allocates and touches 1 MiB after 1 MiB
//! and never frees them, until growing memory fails and the allocation failure traps.

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct Memory;

const CHUNK: usize = 1 << 20;

impl Operator for Memory {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        Ok((Memory, ()))
    }

    fn process(&mut self, _: &mut (), _: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            // Non-zero bytes, so the pages are really written, not lazily zeroed.
            hoard.push(vec![0xA5; CHUNK]);
            std::hint::black_box(&mut hoard);
        }
    }
}

weir_guest::export_operator!(Memory);
