//! Drives an [`Operator`] through the calls of the WIT world on packed batches.
//!
//! The Wasm glue forwards each exported function here, and native callers (the host's
//! benchmark, tests) use the same [`Runner`], so both run identical operator code.

use crate::config::Config;
use crate::emit::Emitter;
use crate::error::Error;
use crate::operator::Operator;
use crate::packed::{self, Batch, StateChunk};
use crate::ports::{Input, Ports};
use crate::record::{Record, Records, sort_headers};
use crate::snapshot;
use crate::state::{Changes, Drained, KeyedState, StateImage};

/// The chunk size of [`Runner::changes`] and [`Runner::restore_image`].
const CHUNK_BYTES: usize = 1 << 20;

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
    /// The names of the inputs and outputs `init` was given.
    ports: Ports,
    /// The size of the last output, to size the next one without reallocating.
    last_output: (usize, usize),
    /// True after the chunk that completed a round: the next `snapshot` ends it.
    round_complete: bool,
}

/// An emitted record, owned: what [`Runner::process_records`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRecord {
    /// The Kafka key, `None` for a record without one.
    pub key: Option<Vec<u8>>,
    /// The Kafka value; empty for a tombstone.
    pub value: Vec<u8>,
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
    /// Name and value of each header, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The index of the output it goes to (0, the first, for a one-output operator).
    pub output: u8,
    /// True for a record without a value (a tombstone).
    pub tombstone: bool,
}

impl<O: Operator> Runner<O> {
    /// `init`: creates the operator from its configuration and the names of its
    /// inputs and outputs ([`Config::with_inputs`], [`Config::with_outputs`]).
    pub fn init(config: Config) -> Result<Self, Error> {
        config.ports().check()?;
        let (operator, state) = O::init(&config)?;
        Ok(Self {
            operator,
            state,
            ports: config.ports().clone(),
            last_output: (0, 0),
            round_complete: false,
        })
    }

    /// `process`: runs one packed batch of input `input` (an index into the inputs
    /// `init` was given) and returns the packed output with each record's output.
    pub fn process_from(&mut self, input: u32, batch: &Batch) -> Result<packed::Emitted, Error> {
        if input as usize >= self.ports.inputs.len() {
            return Err(Error::new(format!(
                "a batch came from input {input}, but the operator has {} inputs {}",
                self.ports.inputs.len(),
                crate::ports::Names(&self.ports.inputs)
            )));
        }
        let records = match Records::new(batch) {
            Ok(records) => records.of_input(Input::new(input)),
            // Out-of-order headers are legal in the WIT, merely unusual: order a copy.
            Err(_) if !batch.headers.is_sorted_by_key(|h| h.entry) => {
                let mut sorted = batch.clone();
                sort_headers(&mut sorted);
                return self.process_from(input, &sorted);
            }
            Err(error) => return Err(error),
        };
        let mut out = self.emitter();
        self.operator.process(&mut self.state, records, &mut out)?;
        self.finish(out)
    }

    /// [`Runner::process_from`] the first input, returning only the records (whatever
    /// output each goes to): the call of a one-input, one-output operator.
    pub fn process(&mut self, batch: &Batch) -> Result<Batch, Error> {
        Ok(self.process_from(0, batch)?.batch)
    }

    /// `on-watermark`: advances event time and returns what it completes, with each
    /// record's output, firing the state's timers due at `watermark` first (see
    /// [`Operator::on_timer`]).
    pub fn on_watermark_emitted(&mut self, watermark: i64) -> Result<packed::Emitted, Error> {
        let mut out = self.emitter();
        self.fire_timers(watermark, &mut out)?;
        self.operator
            .on_watermark(&mut self.state, watermark, &mut out)?;
        self.finish(out)
    }

    /// [`Runner::on_watermark_emitted`], returning only the records.
    pub fn on_watermark(&mut self, watermark: i64) -> Result<Batch, Error> {
        Ok(self.on_watermark_emitted(watermark)?.batch)
    }

    /// Calls `on_timer` for every timer at or before `watermark` registered before
    /// this call, by time then key; those it registers wait for the next watermark.
    fn fire_timers(&mut self, watermark: i64, out: &mut Emitter) -> Result<(), Error> {
        let Some(timers) = self.state.timers() else {
            return Ok(());
        };
        timers.begin_firing();
        let fired = loop {
            let Some((time, key)) = self.state.timers().and_then(|t| t.pop_due(watermark)) else {
                break Ok(());
            };
            if let Err(error) = self.operator.on_timer(&mut self.state, &key, time, out) {
                let context = format!("the timer of key b\"{}\" at {time}", key.escape_ascii());
                break Err(error.context(context));
            }
        };
        if let Some(timers) = self.state.timers() {
            timers.end_firing();
        }
        fired
    }

    /// `snapshot`: the next chunk of the keys changed since the previous round, within
    /// `max_bytes` of data unless one entry alone is bigger; an empty chunk ends the
    /// round.
    pub fn snapshot(&mut self, max_bytes: u32) -> Result<StateChunk, Error> {
        if std::mem::take(&mut self.round_complete) {
            return Ok(StateChunk::default());
        }
        let mut changes = Changes::new(O::STATE_VERSION, max_bytes as usize);
        let drained = self.state.drain_changes(&mut changes)?;
        let chunk = changes.into_chunk();
        self.round_complete = drained == Drained::All && !chunk.is_empty();
        Ok(chunk)
    }

    /// `restore`: adds a chunk of checkpointed entries, upgrading entries of an older
    /// state version.
    pub fn restore(&mut self, chunk: &StateChunk) -> Result<(), Error> {
        for entry in chunk.iter() {
            let (key, value) = entry?;
            let context = || format!("restoring key b\"{}\"", key.escape_ascii());
            let Some(value) = value else {
                return Err(Error::new("a restore holds only present keys, but got a removal")
                    .context(context()));
            };
            let entry = snapshot::parse(value).map_err(|e| e.context(context()))?;
            let state = if entry.version == O::STATE_VERSION {
                snapshot::decode_body(entry.body)
            } else {
                O::upgrade_state(entry.version, entry.body)
            };
            let state = state.map_err(|e| e.context(context()))?;
            crate::state::restore(&mut self.state, key, state).map_err(|e| e.context(context()))?;
        }
        Ok(())
    }

    /// `restored`: ends a restore at event time `watermark`, then calls
    /// [`Operator::restored`].
    pub fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        self.state.restored(watermark)?;
        self.operator.restored(&mut self.state, watermark)
    }

    /// One whole snapshot round in one chunk: the keys changed since the last round.
    pub fn changes(&mut self) -> Result<StateChunk, Error> {
        let mut all = StateChunk::default();
        loop {
            let chunk = self.snapshot(CHUNK_BYTES as u32)?;
            if chunk.is_empty() {
                return Ok(all);
            }
            for (key, value) in chunk.iter().map(Result::unwrap) {
                all.push(key, value);
            }
        }
    }

    /// Restores a whole materialized state, as a host does after a failure.
    pub fn restore_image(&mut self, image: &StateImage, watermark: i64) -> Result<(), Error> {
        for chunk in image.chunks(CHUNK_BYTES) {
            self.restore(&chunk)?;
        }
        self.restored(watermark)
    }

    /// Packs plain records, runs them through [`Runner::process`] and unpacks the
    /// output: the convenient form for tests and native callers.
    pub fn process_records(&mut self, records: &[Record<'_>]) -> Result<Vec<OwnedRecord>, Error> {
        self.process_records_from(0, records)
    }

    /// [`Runner::process_records`] for input `input`: records of the input at that index
    /// of [`Runner::inputs`].
    pub fn process_records_from(
        &mut self,
        input: u32,
        records: &[Record<'_>],
    ) -> Result<Vec<OwnedRecord>, Error> {
        let output = self.process_from(input, &Batch::pack(records))?;
        unpack_emitted(&output)
    }

    /// [`Runner::on_watermark`] with the output unpacked.
    pub fn on_watermark_records(&mut self, watermark: i64) -> Result<Vec<OwnedRecord>, Error> {
        let output = self.on_watermark_emitted(watermark)?;
        unpack_emitted(&output)
    }

    /// The names of the inputs `init` was given: [`Runner::process_from`] takes an
    /// index into them.
    pub fn inputs(&self) -> &[String] {
        &self.ports.inputs
    }

    /// The names of the outputs `init` was given: [`OwnedRecord::output`] is an index
    /// into them.
    pub fn outputs(&self) -> &[String] {
        &self.ports.outputs
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

    /// Checks the outputs the operator named, as the host would, and sizes the next
    /// output after this one.
    fn finish(&mut self, out: Emitter) -> Result<packed::Emitted, Error> {
        let emitted = out.into_emitted();
        let outputs = self.ports.outputs.len();
        if let Some(at) = emitted.outputs.iter().position(|&o| o as usize >= outputs) {
            return Err(Error::new(format!(
                "emitted record {at} to output {}, but the operator has {outputs} outputs {}: \
                 emit only to an Output its own Config gave",
                emitted.outputs[at],
                crate::ports::Names(&self.ports.outputs)
            )));
        }
        let batch = &emitted.batch;
        self.last_output = (batch.entries.len(), batch.data.len());
        Ok(emitted)
    }
}

/// Copies the records of a packed batch out into owned records (all of output 0).
pub fn unpack(batch: &Batch) -> Result<Vec<OwnedRecord>, Error> {
    unpack_to(batch, &[])
}

/// Copies the records of what a call emitted out into owned records, each with its
/// output.
pub fn unpack_emitted(emitted: &packed::Emitted) -> Result<Vec<OwnedRecord>, Error> {
    unpack_to(&emitted.batch, &emitted.outputs)
}

fn unpack_to(batch: &Batch, outputs: &[u8]) -> Result<Vec<OwnedRecord>, Error> {
    Ok(Records::new(batch)?
        .iter()
        .enumerate()
        .map(|(index, record)| OwnedRecord {
            output: outputs.get(index).copied().unwrap_or(0),
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.to_vec(),
            tombstone: record.tombstone,
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
mod tests;
