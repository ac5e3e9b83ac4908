//! Drives an [`Operator`] through the calls of the WIT world on packed batches.
//!
//! The Wasm glue forwards each exported function here, and native callers (the host's
//! benchmark, tests) use the same [`Runner`], so both run identical operator code.

use crate::config::Config;
use crate::emit::Emitter;
use crate::error::Error;
use crate::operator::Operator;
use crate::packed::Batch;
use crate::record::{Record, Records, sort_headers};
use crate::snapshot;

/// One operator instance with its state, called like the host calls a plugin.
///
/// ```
/// use weir_guest::{Config, Emitter, Error, Operator, Record, Records, Runner};
///
/// struct Upper;
/// impl Operator for Upper {
///     type State = ();
///     fn init(_: &Config) -> Result<(Self, ()), Error> { Ok((Upper, ())) }
///     fn process(&mut self, _: &mut (), records: Records<'_>, out: &mut Emitter) -> Result<(), Error> {
///         for r in records {
///             out.emit(r.key, &r.value.to_ascii_uppercase(), r.timestamp);
///         }
///         Ok(())
///     }
/// }
///
/// let mut runner = Runner::<Upper>::init(Config::default())?;
/// let out = runner.process_records(&[Record::new(None, b"abc", 1)])?;
/// assert_eq!(out[0].value, b"ABC");
/// # Ok::<(), Error>(())
/// ```
pub struct Runner<O: Operator> {
    operator: O,
    state: O::State,
    /// The size of the last output, to size the next one without reallocating.
    last_output: (usize, usize),
}

/// An emitted record, owned: what [`Runner::process_records`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The Kafka key, `None` for a record without one.
    pub key: Option<Vec<u8>>,
    /// The Kafka value.
    pub value: Vec<u8>,
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
    /// Name and value of each header, in order.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl<O: Operator> Runner<O> {
    /// `init`: creates the operator from its configuration.
    pub fn init(config: Config) -> Result<Self, Error> {
        let (operator, state) = O::init(&config)?;
        Ok(Self {
            operator,
            state,
            last_output: (0, 0),
        })
    }

    /// `process`: runs one packed batch and returns the packed output.
    pub fn process(&mut self, batch: &Batch) -> Result<Batch, Error> {
        let records = match Records::new(batch) {
            Ok(records) => records,
            // Out-of-order headers are legal in the WIT, merely unusual: order a copy.
            Err(_) if !batch.headers.is_sorted_by_key(|h| h.entry) => {
                let mut sorted = batch.clone();
                sort_headers(&mut sorted);
                return self.process(&sorted);
            }
            Err(error) => return Err(error),
        };
        let mut out = self.emitter();
        self.operator.process(&mut self.state, records, &mut out)?;
        Ok(self.finish(out))
    }

    /// `on-watermark`: advances event time and returns what it completes.
    pub fn on_watermark(&mut self, watermark: i64) -> Result<Batch, Error> {
        let mut out = self.emitter();
        self.operator
            .on_watermark(&mut self.state, watermark, &mut out)?;
        Ok(self.finish(out))
    }

    /// `snapshot`: the state as versioned bytes.
    pub fn snapshot(&self) -> Result<Vec<u8>, Error> {
        snapshot::encode(&self.state, O::STATE_VERSION)
    }

    /// `restore`: replaces the state with a snapshot's, checked against the
    /// configuration; on error the current state is kept.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let snapshot = snapshot::parse(bytes)?;
        let state = if snapshot.version == O::STATE_VERSION {
            snapshot::decode_body(snapshot.body)?
        } else {
            O::upgrade_state(snapshot.version, snapshot.body)?
        };
        self.operator.check_restored(&state)?;
        self.state = state;
        Ok(())
    }

    /// Packs plain records, runs them through [`Runner::process`] and unpacks the
    /// output: the convenient form for tests and native callers.
    pub fn process_records(&mut self, records: &[Record<'_>]) -> Result<Vec<OwnedRecord>, Error> {
        let output = self.process(&Batch::pack(records))?;
        unpack(&output)
    }

    /// [`Runner::on_watermark`] with the output unpacked.
    pub fn on_watermark_records(&mut self, watermark: i64) -> Result<Vec<OwnedRecord>, Error> {
        let output = self.on_watermark(watermark)?;
        unpack(&output)
    }

    /// The operator, as `init` made it.
    pub fn operator(&self) -> &O {
        &self.operator
    }

    /// The current state.
    pub fn state(&self) -> &O::State {
        &self.state
    }

    fn emitter(&self) -> Emitter {
        let (records, data_bytes) = self.last_output;
        Emitter::with_capacity(records, data_bytes)
    }

    fn finish(&mut self, out: Emitter) -> Batch {
        let batch = out.into_batch();
        self.last_output = (batch.entries.len(), batch.data.len());
        batch
    }
}

/// Copies the records of a packed batch out into owned records.
pub fn unpack(batch: &Batch) -> Result<Vec<OwnedRecord>, Error> {
    Ok(Records::new(batch)?
        .iter()
        .map(|record| OwnedRecord {
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.to_vec(),
            timestamp: record.timestamp,
            headers: record
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packed::Header;
    use serde::{Deserialize, Serialize};

    /// Sums values parsed as integers; state version 2 stores the sum as i64,
    /// version 1 stored it as a u32.
    struct Sum;

    #[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
    struct SumState {
        sum: i64,
    }

    impl Operator for Sum {
        type State = SumState;
        const STATE_VERSION: u16 = 2;

        fn init(_: &Config) -> Result<(Self, SumState), Error> {
            Ok((Sum, SumState::default()))
        }

        fn process(
            &mut self,
            state: &mut SumState,
            records: Records<'_>,
            _: &mut Emitter,
        ) -> Result<(), Error> {
            for record in records {
                let text = std::str::from_utf8(record.value).map_err(|e| e.to_string())?;
                state.sum += text.parse::<i64>().map_err(|e| format!("{text:?}: {e}"))?;
            }
            Ok(())
        }

        fn on_watermark(
            &mut self,
            state: &mut SumState,
            wm: i64,
            out: &mut Emitter,
        ) -> Result<(), Error> {
            out.emit(None, state.sum.to_string().as_bytes(), wm);
            Ok(())
        }

        fn check_restored(&self, state: &SumState) -> Result<(), Error> {
            if state.sum < 0 {
                return Err("negative sum".into());
            }
            Ok(())
        }

        fn upgrade_state(version: u16, body: &[u8]) -> Result<SumState, Error> {
            match version {
                1 => Ok(SumState {
                    sum: i64::from(snapshot::decode_body::<u32>(body)?),
                }),
                _ => Err(format!("unknown state version {version}").into()),
            }
        }
    }

    fn sum_of(runner: &mut Runner<Sum>) -> Vec<u8> {
        runner.on_watermark_records(0).unwrap().remove(0).value
    }

    #[test]
    fn snapshot_restores_into_a_fresh_instance() {
        let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
        runner
            .process_records(&[Record::new(None, b"40", 1), Record::new(None, b"2", 2)])
            .unwrap();
        let bytes = runner.snapshot().unwrap();
        let mut fresh = Runner::<Sum>::init(Config::default()).unwrap();
        fresh.restore(&bytes).unwrap();
        assert_eq!(sum_of(&mut fresh), b"42");
    }

    #[test]
    fn restore_upgrades_old_versions_and_refuses_unknown_ones() {
        let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
        runner
            .restore(&snapshot::encode(&7u32, 1).unwrap())
            .unwrap();
        assert_eq!(sum_of(&mut runner), b"7");

        let error = runner
            .restore(&snapshot::encode(&7u32, 3).unwrap())
            .unwrap_err();
        assert_eq!(error.message(), "unknown state version 3");
        let error = runner
            .restore(&snapshot::encode(&SumState { sum: -1 }, 2).unwrap())
            .unwrap_err();
        assert_eq!(error.message(), "negative sum");
        assert_eq!(runner.state().sum, 7, "a failed restore keeps the state");
    }

    #[test]
    fn default_upgrade_names_both_versions() {
        struct Plain;
        impl Operator for Plain {
            type State = u8;
            fn init(_: &Config) -> Result<(Self, u8), Error> {
                Ok((Plain, 0))
            }
            fn process(
                &mut self,
                _: &mut u8,
                _: Records<'_>,
                _: &mut Emitter,
            ) -> Result<(), Error> {
                Ok(())
            }
        }
        let mut runner = Runner::<Plain>::init(Config::default()).unwrap();
        let error = runner
            .restore(&snapshot::encode(&0u8, 5).unwrap())
            .unwrap_err();
        assert!(
            error
                .message()
                .starts_with("snapshot holds state version 5 but this plugin reads version 1"),
            "{error}"
        );
    }

    #[test]
    fn errors_and_unordered_headers() {
        let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
        let error = runner
            .process_records(&[Record::new(None, b"x", 1)])
            .unwrap_err();
        assert!(error.message().contains("\"x\""), "{error}");

        let mut batch = Batch::pack(&[Record::new(None, b"1", 1), Record::new(None, b"2", 2)]);
        batch.headers = vec![
            Header {
                entry: 1,
                name: "b".into(),
                value: vec![],
            },
            Header {
                entry: 0,
                name: "a".into(),
                value: vec![],
            },
        ];
        runner.process(&batch).unwrap();
        assert_eq!(runner.state().sum, 3);
    }
}
