//! `dedup` as it is written without per-entry state or timers, for the changelog
//! benchmark only: a key's remembered ids are one `BTreeMap`, its one state entry,
//! rewritten whole when one id changes, and every watermark scans every key for ids
//! to forget. Same configuration and output as `plugins/dedup`.

#[path = "../../dedup/src/id.rs"]
mod id;

use std::collections::BTreeMap;

use weir_guest::state::Keyed;
use weir_guest::{Config, Emitter, Error, Operator, Records};

/// Per key: each remembered id with the event time of the record that emitted it.
pub type State = Keyed<BTreeMap<Vec<u8>, i64>>;

/// The operator: its configuration.
#[derive(Debug)]
pub struct DedupBtree {
    field: String,
    horizon_ms: i64,
}

impl Operator for DedupBtree {
    type State = State;

    fn init(config: &Config) -> Result<(Self, State), Error> {
        config.deny_unknown(&["horizon_ms", "field"])?;
        let horizon_ms: i64 = config.require("horizon_ms", "a positive integer of milliseconds")?;
        if horizon_ms <= 0 || horizon_ms > 1 << 40 {
            return Err(Error::new(format!(
                "operator config `horizon_ms` = {horizon_ms} is out of range"
            )));
        }
        let field = config.get("field").unwrap_or("id").to_owned();
        Ok((DedupBtree { field, horizon_ms }, State::default()))
    }

    fn process(
        &mut self,
        seen: &mut State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let Some(id) = id::of(record.value, &self.field) else {
                out.forward(&record);
                continue;
            };
            let key = record.key.unwrap_or(b"");
            let time = record.timestamp;
            match seen.get(key).and_then(|ids| ids.get(&id)) {
                Some(&first) if time.abs_diff(first) < self.horizon_ms as u64 => continue,
                Some(&first) if time < first => {}
                _ => {
                    seen.entry(key).insert(id, time);
                }
            }
            out.forward(&record);
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        seen: &mut State,
        watermark: i64,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        let horizon = self.horizon_ms;
        let expired = |first: &i64| first.saturating_add(horizon) <= watermark;
        let due: Vec<Box<[u8]>> = seen
            .iter()
            .filter(|(_, ids)| ids.values().any(expired))
            .map(|(key, _)| key.into())
            .collect();
        for key in due {
            let ids = seen.get_mut(&key).expect("a key found above");
            ids.retain(|_, first| !expired(first));
            if ids.is_empty() {
                seen.remove(&key);
            }
        }
        Ok(())
    }
}

weir_guest::export_operator!(DedupBtree);
