//! Counts records per key in tumbling event-time windows aligned to epoch 0, and
//! emits one JSON record per (key, window) once the watermark passes the window's
//! end. The exact output format is in `plugins/README.md`; tests rely on it.

use weir_guest::window::TumblingWindows;
use weir_guest::{Config, Emitter, Error, Operator, Records};

/// The operator; its only configuration is the window size.
#[derive(Debug)]
pub struct WindowCount {
    window_ms: i64,
}

impl WindowCount {
    /// The window size in milliseconds.
    pub fn window_ms(&self) -> i64 {
        self.window_ms
    }
}

/// Largest accepted `window_ms` (about 31 years), far from where i64 arithmetic on
/// event times could overflow.
const MAX_WINDOW_MS: i64 = 1 << 40;

impl Operator for WindowCount {
    type State = TumblingWindows<u64>;

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        config.deny_unknown(&["window_ms"])?;
        const EXPECTED: &str = "a positive integer of milliseconds, e.g. 60000";
        let window_ms: i64 = config.require("window_ms", EXPECTED)?;
        if window_ms <= 0 || window_ms > MAX_WINDOW_MS {
            return Err(Error::new(format!(
                "operator config `window_ms` = {window_ms} is out of range: expected {EXPECTED}, \
                 at most {MAX_WINDOW_MS}"
            )));
        }
        Ok((Self { window_ms }, TumblingWindows::new(window_ms)?))
    }

    fn process(
        &mut self,
        windows: &mut Self::State,
        records: Records<'_>,
        _out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            // A late record (its window already fired) is dropped and counted.
            if let Some(count) = windows.accumulator(record.key.unwrap_or(b""), record.timestamp) {
                *count += 1;
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        windows: &mut Self::State,
        watermark: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        windows.fire(watermark, |window, key, count| {
            out.emit_with(Some(key), window.end - 1, |value| {
                // Written piecewise rather than with `write!`: output formatting is a
                // measurable share of this operator's cost in Wasm.
                value.extend(b"{\"key\":");
                value.json_string(key);
                value.extend(b",\"window_start\":");
                value.integer(window.start);
                value.extend(b",\"window_end\":");
                value.integer(window.end);
                value.extend(b",\"count\":");
                value.unsigned(count);
                value.extend(b"}");
            });
        });
        Ok(())
    }
}

weir_guest::export_operator!(WindowCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::state::StateImage;
    use weir_guest::{Record, Runner};

    fn runner(window_ms: &str) -> Result<Runner<WindowCount>, Error> {
        Runner::init(Config::from_pairs([("window_ms", window_ms)]))
    }

    #[test]
    fn emits_exact_json_per_key_and_window() {
        let mut op = runner("1000").unwrap();
        let records = [
            Record::new(Some(b"b"), b"x", 10),
            Record::new(Some(b"a"), b"x", 999),
            Record::new(None, b"x", 500),
            Record::new(Some(b"a"), b"x", 1000),
            Record::new(Some(b"q\"uote"), b"x", -1),
        ];
        assert!(op.process_records(&records).unwrap().is_empty());
        let out = op.on_watermark_records(1000).unwrap();
        let values: Vec<_> = out
            .iter()
            .map(|r| String::from_utf8(r.value.clone()).unwrap())
            .collect();
        assert_eq!(
            values,
            [
                r#"{"key":"q\"uote","window_start":-1000,"window_end":0,"count":1}"#,
                r#"{"key":"","window_start":0,"window_end":1000,"count":1}"#,
                r#"{"key":"a","window_start":0,"window_end":1000,"count":1}"#,
                r#"{"key":"b","window_start":0,"window_end":1000,"count":1}"#,
            ]
        );
        assert_eq!(out[0].timestamp, -1);
        assert_eq!(out[1].key.as_deref(), Some(&b""[..]));
        assert_eq!(out[2].key.as_deref(), Some(&b"a"[..]));
        assert_eq!(out[2].timestamp, 999);
        let out = op.on_watermark_records(2000).unwrap();
        assert_eq!(
            out[0].value,
            br#"{"key":"a","window_start":1000,"window_end":2000,"count":1}"#
        );
    }

    #[test]
    fn rejects_bad_config_with_the_key_named() {
        for bad in ["0", "-5", "ten", ""] {
            let error = runner(bad).err().unwrap();
            assert!(error.message().contains("`window_ms`"), "{bad}: {error}");
        }
        let error = Runner::<WindowCount>::init(Config::default())
            .err()
            .unwrap();
        assert!(
            error.message().contains("`window_ms` is missing"),
            "{error}"
        );
        let error =
            Runner::<WindowCount>::init(Config::from_pairs([("window_ms", "5"), ("size", "1")]))
                .err()
                .unwrap();
        assert!(error.message().contains("unknown key `size`"), "{error}");
    }

    #[test]
    fn restores_counts_and_refuses_another_window_size() {
        let mut op = runner("100").unwrap();
        op.process_records(&[Record::new(Some(b"k"), b"", 5)])
            .unwrap();
        let mut checkpoint = StateImage::default();
        checkpoint.apply(&op.changes().unwrap()).unwrap();
        let mut restored = runner("100").unwrap();
        restored.restore_image(&checkpoint, i64::MIN).unwrap();
        restored
            .process_records(&[Record::new(Some(b"k"), b"", 7)])
            .unwrap();
        let out = restored.on_watermark_records(100).unwrap();
        assert_eq!(
            out[0].value,
            br#"{"key":"k","window_start":0,"window_end":100,"count":2}"#
        );
        let error = runner("200")
            .unwrap()
            .restore_image(&checkpoint, i64::MIN)
            .unwrap_err();
        assert!(error.message().contains("100 ms windows"), "{error}");
    }
}
