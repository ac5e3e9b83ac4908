//! A running count per key, for the state-upgrade test: each record is emitted with its
//! key's count so far as the value. State version 1 keeps a key's count as a `u32`.

use weir_guest::state::Keyed;
use weir_guest::{Config, Emitter, Error, Operator, Records};

/// The operator; it takes no configuration.
pub struct RunningCount;

impl Operator for RunningCount {
    type State = Keyed<u32>;
    const STATE_VERSION: u16 = 1;

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        config.deny_unknown(&[])?;
        Ok((RunningCount, Keyed::default()))
    }

    fn process(&mut self, counts: &mut Self::State, records: Records<'_>, out: &mut Emitter) -> Result<(), Error> {
        for record in records {
            let count = counts.entry(record.key.unwrap_or(b""));
            *count += 1;
            out.emit(record.key, count.to_string().as_bytes(), record.timestamp);
        }
        Ok(())
    }
}

weir_guest::export_operator!(RunningCount);
