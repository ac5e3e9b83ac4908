//! Test plugin for the CPU deadline: `process` never returns, whatever the batch.
//! `init`, `snapshot` and `restore` work, so only the deadline can stop it. A first
//! record whose value is `grow N` makes it touch N MiB of fresh memory first, to
//! earn the grace a call gets for growing its memory, and then loop all the same.

use weir_guest::{Config, Emitter, Error, Operator, Records};

pub struct Loop;

impl Operator for Loop {
    type State = ();

    fn init(_: &Config) -> Result<(Self, ()), Error> {
        Ok((Loop, ()))
    }

    fn process(&mut self, _: &mut (), records: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
        let grow_mib = records
            .into_iter()
            .next()
            .and_then(|record| std::str::from_utf8(record.value).ok()?.strip_prefix("grow ")?.parse().ok())
            .unwrap_or(0usize);
        // Non-zero bytes, so the pages are really written.
        let hoard = vec![0xA5u8; grow_mib << 20];
        std::hint::black_box(&hoard);
        let mut spins = 0u64;
        loop {
            // black_box keeps the loop from being optimised into anything cheaper.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

weir_guest::export_operator!(Loop);
