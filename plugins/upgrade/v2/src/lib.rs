//! A running count per key, for the state-upgrade test, as `upgrade-v1` emits it. State
//! version 2 keeps a key's count in a struct of a `u64`; `upgrade_state` reads
//! version 1's `u32`, so a job moves from v1 to v2 with its counts.

use serde::{Deserialize, Serialize};
use weir_guest::state::Keyed;
use weir_guest::{Config, Emitter, Error, Operator, Records, snapshot};

/// The operator; it takes no configuration.
pub struct RunningCount;

/// One key's state in version 2.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Tally {
    /// Records of the key so far.
    pub count: u64,
}

impl Operator for RunningCount {
    type State = Keyed<Tally>;
    const STATE_VERSION: u16 = 2;

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        config.deny_unknown(&[])?;
        Ok((RunningCount, Keyed::default()))
    }

    fn process(&mut self, tallies: &mut Self::State, records: Records<'_>, out: &mut Emitter) -> Result<(), Error> {
        for record in records {
            let tally = tallies.entry(record.key.unwrap_or(b""));
            tally.count += 1;
            out.emit(record.key, tally.count.to_string().as_bytes(), record.timestamp);
        }
        Ok(())
    }

    fn upgrade_state(version: u16, body: &[u8]) -> Result<Tally, Error> {
        match version {
            1 => Ok(Tally { count: u64::from(snapshot::decode_body::<u32>(body)?) }),
            other => Err(Error::new(format!("upgrade-v2 reads state versions 1 and 2, not {other}"))),
        }
    }
}

weir_guest::export_operator!(RunningCount);
