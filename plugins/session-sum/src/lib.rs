//! Sums a numeric field of JSON values per key over session windows: a session
//! closes after `gap_ms` without a record for its key, and is emitted once the
//! watermark passes its end. See README.md for the configuration and output.

mod field;
mod total;

use std::fmt::Write;

use weir_guest::window::SessionWindows;
use weir_guest::{Config, Emitter, Error, Operator, Records};

pub use total::Total;

/// The operator: which field to sum, and how many records this instance skipped.
#[derive(Debug)]
pub struct SessionSum {
    field: String,
    skipped: u64,
}

impl SessionSum {
    /// Records this instance skipped because their value had no numeric `field`
    /// (counted since it started, not checkpointed).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }
}

/// What survives a restart: the open sessions, per key.
pub type State = SessionWindows<Total>;

/// Largest accepted `gap_ms` (about 31 years), far from i64 overflow.
const MAX_GAP_MS: i64 = 1 << 40;

impl Operator for SessionSum {
    type State = State;

    fn init(config: &Config) -> Result<(Self, State), Error> {
        config.deny_unknown(&["field", "gap_ms"])?;
        const GAP: &str = "a positive integer of milliseconds, e.g. 30000";
        let gap_ms: i64 = config.require("gap_ms", GAP)?;
        if gap_ms <= 0 || gap_ms > MAX_GAP_MS {
            return Err(Error::new(format!(
                "operator config `gap_ms` = {gap_ms} is out of range: expected {GAP}, at most \
                 {MAX_GAP_MS}"
            )));
        }
        let field: String =
            config.require("field", "the name of a top-level numeric JSON field")?;
        if field.is_empty() {
            return Err(Error::new(
                "operator config `field` is empty: name a top-level numeric JSON field",
            ));
        }
        Ok((Self { field, skipped: 0 }, SessionWindows::new(gap_ms)?))
    }

    fn process(
        &mut self,
        state: &mut State,
        records: Records<'_>,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            match field::number(record.value, &self.field) {
                Ok(number) => {
                    let key = record.key.unwrap_or(b"");
                    state.update(key, record.timestamp, |total| total.add(&number));
                }
                Err(reason) => {
                    // Logged once per instance: a stream of bad records must not flood the log.
                    if self.skipped == 0 {
                        weir_guest::warn!(
                            "session-sum skips records without a numeric `{}`; first one at \
                             timestamp {}: {reason}",
                            self.field,
                            record.timestamp
                        );
                    }
                    self.skipped += 1;
                }
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        state: &mut State,
        watermark: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        state.fire(watermark, |session, key, total| {
            out.emit_with(Some(key), session.end - 1, |value| {
                value.extend(b"{\"key\":");
                value.json_string(key);
                // Writing to a Vec cannot fail.
                let _ = write!(
                    value,
                    ",\"session_start\":{},\"session_end\":{},\"count\":{},\"sum\":",
                    session.start,
                    session.end,
                    total.count()
                );
                total.write_sum(value);
                value.extend(b"}");
            });
        });
        Ok(())
    }
}

weir_guest::export_operator!(SessionSum);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::state::StateImage;
    use weir_guest::{Record, Runner};

    fn runner() -> Runner<SessionSum> {
        Runner::init(Config::from_pairs([("field", "amount"), ("gap_ms", "100")])).unwrap()
    }

    fn values(out: Vec<weir_guest::OwnedRecord>) -> Vec<String> {
        out.into_iter()
            .map(|r| String::from_utf8(r.value).unwrap())
            .collect()
    }

    #[test]
    fn sums_per_key_and_session() {
        let mut op = runner();
        op.process_records(&[
            Record::new(
                Some(b"u1"),
                br#"{"amount": 5, "x": [1, {"amount": 99}]}"#,
                0,
            ),
            Record::new(Some(b"u2"), br#"{"amount": 1.5}"#, 10),
            Record::new(Some(b"u1"), br#"{"amount": -2}"#, 90),
            Record::new(Some(b"u1"), br#"{"amount": 7}"#, 500),
            Record::new(Some(b"u2"), br#"{"other": 1}"#, 20),
            Record::new(Some(b"u2"), b"not json", 20),
            Record::new(Some(b"u2"), br#"{"amount": "3"}"#, 20),
        ])
        .unwrap();
        assert_eq!(op.operator().skipped(), 3);
        let out = op.on_watermark_records(200).unwrap();
        assert_eq!(out[0].timestamp, 109);
        assert_eq!(
            values(out),
            [
                r#"{"key":"u2","session_start":10,"session_end":110,"count":1,"sum":1.5}"#,
                r#"{"key":"u1","session_start":0,"session_end":190,"count":2,"sum":3}"#,
            ]
        );
        let mut checkpoint = StateImage::default();
        checkpoint.apply(&op.changes().unwrap()).unwrap();
        let mut restored = runner();
        restored.restore_image(&checkpoint, 200).unwrap();
        assert_eq!(
            values(restored.on_watermark_records(600).unwrap()),
            [r#"{"key":"u1","session_start":500,"session_end":600,"count":1,"sum":7}"#]
        );
    }

    #[test]
    fn names_bad_config() {
        let init = |pairs: &[(&str, &str)]| {
            Runner::<SessionSum>::init(Config::from_pairs(pairs.iter().copied()))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(init(&[("field", "a")]).contains("`gap_ms` is missing"));
        assert!(init(&[("field", "a"), ("gap_ms", "0")]).contains("`gap_ms` = 0 is out of range"));
        assert!(init(&[("gap_ms", "5")]).contains("`field` is missing"));
        assert!(
            init(&[("field", "a"), ("gap_ms", "5"), ("gap", "5")]).contains("unknown key `gap`")
        );
    }
}
