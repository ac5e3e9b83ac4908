//! [`Timers`]: per-key event-time timers, fired by the watermark in time order and
//! checkpointed as keyed state, one entry per timer, so they restore, rescale and move
//! with their key like any other keyed state.

use std::collections::BTreeSet;

use super::{Changes, Drained, KeyedMap, KeyedState};
use crate::error::Error;
use crate::snapshot;

/// Event-time timers per key: part of an operator's state (alone, or in a tuple such as
/// `(KeyedMap<..>, Timers)`), fired through [`Operator::on_timer`](crate::Operator::on_timer).
///
/// Register a time for a key from [`process`](crate::Operator::process) (for the key of
/// the record at hand) or from `on_timer` (for the timer's key, or any key the instance
/// received records for; the host keeps state only in its own key groups). When the
/// watermark reaches a timer's time, the [`Runner`](crate::Runner) removes it and calls
/// `on_timer` with its key and time, before [`on_watermark`](crate::Operator::on_watermark)
/// and in order of time, then key bytes. A key holds a time at most once: registering
/// it again does nothing. A timer registered for a time the watermark has passed
/// fires at the next watermark, as does one that `on_timer` registers while a
/// watermark fires others.
///
/// Each timer is a state entry of its own: a checkpoint writes the timers registered,
/// fired or deleted since the last one.
///
/// ```
/// use weir_guest::state::Timers;
/// use weir_guest::{Config, Emitter, Error, Operator, Record, Records, Runner};
///
/// /// Emits "timeout" for a key 100 ms of event time after its last record.
/// struct Timeout;
///
/// impl Operator for Timeout {
///     type State = (weir_guest::state::Keyed<i64>, Timers);
///
///     fn init(_: &Config) -> Result<(Self, Self::State), Error> {
///         Ok((Timeout, Default::default()))
///     }
///
///     fn process(&mut self, (last, timers): &mut Self::State, records: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
///         for record in records {
///             let key = record.key.unwrap_or(b"");
///             if let Some(previous) = last.insert(key, record.timestamp) {
///                 timers.delete(key, previous + 100);
///             }
///             timers.register(key, record.timestamp + 100);
///         }
///         Ok(())
///     }
///
///     fn on_timer(&mut self, (last, _): &mut Self::State, key: &[u8], time: i64, out: &mut Emitter) -> Result<(), Error> {
///         last.remove(key);
///         out.emit(Some(key), b"timeout", time);
///         Ok(())
///     }
/// }
///
/// let mut runner = Runner::<Timeout>::init(Config::default())?;
/// runner.process_records(&[Record::new(Some(b"a"), b"", 0), Record::new(Some(b"a"), b"", 50)])?;
/// assert!(runner.on_watermark_records(149)?.is_empty());
/// let fired = runner.on_watermark_records(150)?;
/// assert_eq!((fired[0].value.as_slice(), fired[0].timestamp), (&b"timeout"[..], 150));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Timers {
    /// The times of each key: what is checkpointed, with its change tracking.
    entries: KeyedMap<i64, ()>,
    /// Every timer not registered during the current firing, by time then key.
    pub(super) queue: BTreeSet<(i64, Box<[u8]>)>,
    /// While a watermark fires timers: those registered meanwhile, queued once it is
    /// done so that they fire at the next watermark.
    deferred: Option<Vec<(i64, Box<[u8]>)>>,
}

impl Timers {
    /// Registers a timer at event time `time` for `key`; false if it was registered.
    pub fn register(&mut self, key: &[u8], time: i64) -> bool {
        if self.entries.contains(key, &time) {
            return false;
        }
        self.entries.insert(key, time, ());
        match &mut self.deferred {
            Some(deferred) => deferred.push((time, key.into())),
            None => {
                self.queue.insert((time, key.into()));
            }
        }
        true
    }

    /// Deletes `key`'s timer at `time`; false if there was none.
    pub fn delete(&mut self, key: &[u8], time: i64) -> bool {
        if self.entries.remove(key, &time).is_none() {
            return false;
        }
        let timer = (time, Box::<[u8]>::from(key));
        if !self.queue.remove(&timer)
            && let Some(deferred) = &mut self.deferred
        {
            deferred.retain(|queued| *queued != timer);
        }
        true
    }

    /// True when `key` has a timer at `time`.
    pub fn contains(&self, key: &[u8], time: i64) -> bool {
        self.entries.contains(key, &time)
    }

    /// The times of `key`'s timers, earliest first.
    pub fn times(&self, key: &[u8]) -> impl Iterator<Item = i64> + use<'_> {
        self.entries.entries(key).map(|(&time, ())| time)
    }

    /// The earliest timer, by time then key bytes: `(time, key)`.
    pub fn next(&self) -> Option<(i64, &[u8])> {
        let queued = self.queue.first().map(|(time, key)| (*time, &key[..]));
        let deferred = self
            .deferred
            .iter()
            .flatten()
            .map(|(time, key)| (*time, &key[..]));
        queued.into_iter().chain(deferred).min()
    }

    /// The number of timers, over all keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no timer is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Starts firing timers for a watermark: those registered from now on wait for the
    /// next one.
    pub(crate) fn begin_firing(&mut self) {
        self.end_firing();
        self.deferred = Some(Vec::new());
    }

    /// Removes and returns the earliest timer at or before `watermark` registered
    /// before the firing began.
    pub(crate) fn pop_due(&mut self, watermark: i64) -> Option<(i64, Box<[u8]>)> {
        let (time, _) = self.queue.first()?;
        if *time > watermark {
            return None;
        }
        let (time, key) = self.queue.pop_first()?;
        let removed = self.entries.remove(&key, &time);
        debug_assert!(removed.is_some(), "a queued timer is an entry");
        Some((time, key))
    }

    /// Queues the timers registered while firing.
    pub(crate) fn end_firing(&mut self) {
        for timer in self.deferred.take().into_iter().flatten() {
            self.queue.insert(timer);
        }
    }
}

impl KeyedState for Timers {
    /// A timer is its key and time, both in its state key.
    type Entry = ();
    const SUB_KEYS: bool = true;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        self.entries.drain_changes(changes)
    }

    fn restore_entry(&mut self, key: &[u8], entry: ()) -> Result<(), Error> {
        self.restore_under(key, &[], entry)
    }

    fn restore_under(&mut self, key: &[u8], sub: &[u8], entry: ()) -> Result<(), Error> {
        self.entries.restore_under(key, sub, entry)?;
        let time: i64 = snapshot::decode_body(sub)?;
        self.queue.insert((time, key.into()));
        Ok(())
    }

    fn timers(&mut self) -> Option<&mut Timers> {
        Some(self)
    }
}
