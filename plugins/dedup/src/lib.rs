//! Drops duplicate records per key: a record whose id (a top-level field of its JSON
//! value) its key emitted less than `horizon_ms` of event time before or after is
//! dropped; the others pass unchanged. Each id is remembered as its own state entry
//! and forgotten by a timer once the watermark passes its time plus the horizon, so a
//! checkpoint costs the ids that changed. Configuration and output: `README.md`.

mod id;

use std::collections::BTreeMap;

use weir_guest::state::{KeyedMap, Timers};
use weir_guest::{Config, Emitter, Error, Operator, Records};

/// Per key, each remembered id with the event time of the record that emitted it, and
/// a timer at each such time plus the horizon.
pub type State = (KeyedMap<Vec<u8>, i64>, Timers);

/// Per expiry time, the ids of one key remembered until then.
type Expiring = BTreeMap<i64, Vec<Vec<u8>>>;

/// The operator: its configuration, and an index derived from the state.
#[derive(Debug)]
pub struct Dedup {
    field: String,
    horizon_ms: i64,
    /// Per key, per expiry time, the ids remembered until then: which ids a timer
    /// forgets. Derived from the state, so `restored` rebuilds it.
    expiring: BTreeMap<Box<[u8]>, Expiring>,
    /// Records passed on without an id since this instance started (not checkpointed).
    without_id: u64,
}

impl Dedup {
    /// Records this instance passed on without an id (their value had no `field`).
    pub fn without_id(&self) -> u64 {
        self.without_id
    }

    /// Notes that `id` of `key`, remembered at `time`, is forgotten at `expiry`.
    fn expires(&mut self, key: &[u8], id: Vec<u8>, expiry: i64) {
        let times = match self.expiring.get_mut(key) {
            Some(times) => times,
            None => self.expiring.entry(key.into()).or_default(),
        };
        times.entry(expiry).or_default().push(id);
    }
}

/// Largest accepted `horizon_ms` (about 31 years), far from i64 overflow.
const MAX_HORIZON_MS: i64 = 1 << 40;

impl Operator for Dedup {
    type State = State;

    fn init(config: &Config) -> Result<(Self, State), Error> {
        config.deny_unknown(&["horizon_ms", "field"])?;
        const HORIZON: &str = "a positive integer of milliseconds, e.g. 600000";
        let horizon_ms: i64 = config.require("horizon_ms", HORIZON)?;
        if horizon_ms <= 0 || horizon_ms > MAX_HORIZON_MS {
            return Err(Error::new(format!(
                "operator config `horizon_ms` = {horizon_ms} is out of range: expected {HORIZON}, \
                 at most {MAX_HORIZON_MS}"
            )));
        }
        let field = config.get("field").unwrap_or("id").to_owned();
        if field.is_empty() {
            return Err(Error::new(
                "operator config `field` is empty: name the top-level JSON field holding the id",
            ));
        }
        let dedup = Dedup {
            field,
            horizon_ms,
            expiring: BTreeMap::new(),
            without_id: 0,
        };
        Ok((dedup, State::default()))
    }

    fn process(
        &mut self,
        (seen, timers): &mut State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let Some(id) = id::of(record.value, &self.field) else {
                if self.without_id == 0 {
                    weir_guest::warn!(
                        "dedup passes on records without a `{}` unchanged; the first at timestamp {}",
                        self.field,
                        record.timestamp
                    );
                }
                self.without_id += 1;
                out.forward(&record);
                continue;
            };
            let key = record.key.unwrap_or(b"");
            let time = record.timestamp;
            match seen.get(key, &id[..]) {
                Some(&first) if time.abs_diff(first) < self.horizon_ms as u64 => continue,
                // Older by a horizon or more: passed on, the later one stays remembered.
                Some(&first) if time < first => {}
                _ => {
                    let expiry = time.saturating_add(self.horizon_ms);
                    seen.insert(key, id.clone(), time);
                    timers.register(key, expiry);
                    self.expires(key, id, expiry);
                }
            }
            out.forward(&record);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        (seen, _): &mut State,
        key: &[u8],
        time: i64,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        let Some(times) = self.expiring.get_mut(key) else {
            return Ok(());
        };
        for id in times.remove(&time).unwrap_or_default() {
            // An id emitted again since is remembered until a later timer.
            if seen
                .get(key, &id[..])
                .is_some_and(|&first| first.saturating_add(self.horizon_ms) <= time)
            {
                seen.remove(key, &id[..]);
            }
        }
        if times.is_empty() {
            self.expiring.remove(key);
        }
        Ok(())
    }

    fn restored(&mut self, (seen, _): &mut State, _watermark: i64) -> Result<(), Error> {
        self.expiring.clear();
        for (key, id, &time) in seen.iter() {
            self.expires(key, id.clone(), time.saturating_add(self.horizon_ms));
        }
        Ok(())
    }
}

weir_guest::export_operator!(Dedup);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::state::StateImage;
    use weir_guest::{Record, Runner};

    fn runner(horizon: &str) -> Runner<Dedup> {
        Runner::init(Config::from_pairs([("horizon_ms", horizon)])).unwrap()
    }

    fn passed(out: Vec<weir_guest::OwnedRecord>) -> Vec<(String, i64)> {
        out.into_iter()
            .map(|r| (String::from_utf8(r.value).unwrap(), r.timestamp))
            .collect()
    }

    #[test]
    fn drops_an_id_seen_within_the_horizon_and_forgets_it_after() {
        let mut op = runner("100");
        let out = op
            .process_records(&[
                Record::new(Some(b"a"), br#"{"id":"x","n":1}"#, 1_000),
                Record::new(Some(b"a"), br#"{"id":"x","n":2}"#, 1_099),
                Record::new(Some(b"b"), br#"{"id":"x","n":3}"#, 1_050),
                Record::new(Some(b"a"), br#"{"id":7}"#, 1_010),
                Record::new(Some(b"a"), br#"{"id":"x","n":4}"#, 1_100),
                Record::new(Some(b"a"), b"no id", 1_100),
                Record::new(Some(b"a"), br#"{"id":"x","n":5}"#, 1_150),
            ])
            .unwrap();
        assert_eq!(
            passed(out),
            [
                (r#"{"id":"x","n":1}"#.to_owned(), 1_000),
                (r#"{"id":"x","n":3}"#.to_owned(), 1_050),
                (r#"{"id":7}"#.to_owned(), 1_010),
                (r#"{"id":"x","n":4}"#.to_owned(), 1_100),
                ("no id".to_owned(), 1_100),
            ]
        );
        assert_eq!(op.operator().without_id(), 1);
        assert_eq!(op.state().0.len(), 3, "a's x (from 1100) and 7, b's x");
        op.on_watermark(1_200).unwrap();
        assert_eq!(
            op.state().0.get(b"a", &b"x"[..]),
            None,
            "forgotten at 1100 + 100"
        );
        assert!(op.state().0.is_empty() && op.state().1.is_empty());
    }

    #[test]
    fn a_checkpoint_holds_the_ids_that_changed_and_a_restore_goes_on() {
        let mut op = runner("1000");
        let ids: Vec<String> = (0..60).map(|i| format!(r#"{{"id":{i}}}"#)).collect();
        let records: Vec<Record<'_>> = ids
            .iter()
            .enumerate()
            .map(|(i, v)| Record::new(Some(b"k"), v.as_bytes(), i as i64))
            .collect();
        op.process_records(&records).unwrap();
        let mut image = StateImage::default();
        image.apply(&op.changes().unwrap()).unwrap();
        assert_eq!(image.entries.len(), 120, "60 ids and their 60 timers");
        op.process_records(&[Record::new(Some(b"k"), br#"{"id":"new"}"#, 100)])
            .unwrap();
        let round = op.changes().unwrap();
        assert_eq!(round.len(), 2, "one id and its timer");
        image.apply(&round).unwrap();

        let mut restored = runner("1000");
        restored.restore_image(&image, 100).unwrap();
        let out = restored
            .process_records(&[
                Record::new(Some(b"k"), br#"{"id":"new"}"#, 500),
                Record::new(Some(b"k"), br#"{"id":3}"#, 1_003),
            ])
            .unwrap();
        assert_eq!(passed(out), [(r#"{"id":3}"#.to_owned(), 1_003)]);
        restored.on_watermark(1_099).unwrap();
        assert_eq!(
            restored.state().0.len(),
            2,
            "3 (again, from 1003) and new (until 1100) are left"
        );
        restored.on_watermark(1_100).unwrap();
        assert_eq!(restored.state().0.len(), 1);
    }

    #[test]
    fn names_bad_config() {
        let init = |pairs: &[(&str, &str)]| {
            Runner::<Dedup>::init(Config::from_pairs(pairs.iter().copied()))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(init(&[]).contains("`horizon_ms` is missing"));
        assert!(init(&[("horizon_ms", "0")]).contains("`horizon_ms` = 0 is out of range"));
        assert!(init(&[("horizon_ms", "5"), ("field", "")]).contains("`field` is empty"));
        assert!(init(&[("horizon_ms", "5"), ("window", "5")]).contains("unknown key `window`"));
    }
}
