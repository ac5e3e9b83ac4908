//! An operator subtask: one Wasm instance on its own thread. It aligns barriers across
//! its inputs (an input that delivered barrier N is not read until all have), takes the
//! guest's state changes into the checkpoint, and isolates records suspected of
//! crashing the plugin.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};

use crate::batch::Batch;
use crate::checkpoint::layout::{self, TaskId};
use crate::chunk::{self, StateChanges};
use crate::dataflow::{DeadLetter, Event, Fanout, InputTopics, KeyGroups, Message, Origin, Pace, Records, Shard, TaskFailure, kafka_partition, murmur2};
use crate::metrics::OperatorMetrics;
use crate::operator::{Emitted, OperatorError, OperatorInstance};
use crate::source::Bootstrap;
use crate::state::changelog::writer::ChangelogWriter;

use super::fault::{self, Step};

pub(super) struct OperatorTask<'a> {
    /// The operator's name in the job and its position in the chain.
    pub(super) name: String,
    pub(super) stage: u32,
    pub(super) subtask: u32,
    pub(super) instance: OperatorInstance,
    /// Event time this subtask has reached (restored from the checkpoint).
    pub(super) watermark: i64,
    /// Every channel into the subtask: from each upstream task of each of its inputs.
    pub(super) inputs: Vec<InputChannel>,
    /// `outputs[i]`: every reader of the operator's output i.
    pub(super) outputs: Vec<Fanout>,
    pub(super) key_groups: KeyGroups,
    /// With a table input: the gate the stream sources wait at, which this subtask
    /// passes once every table channel delivered its `TableEnd`.
    pub(super) bootstrap: Option<Arc<Bootstrap>>,
    /// Where a firing of results says so (a checkpoint may then come early).
    pub(super) pace: Arc<Pace>,
    /// The key groups this subtask owns when its input is routed by key; `None` when
    /// it is not, and then the operator may keep no state.
    pub(super) owned: Option<Range<u32>>,
    /// In a process of a scaled-out job, the partitions it owns: of its range, the
    /// subtask owns only their groups, and a re-keyed record must stay in them.
    pub(super) shard: Option<Shard>,
    pub(super) events: Sender<Event>,
    /// Input records that crashed this job before: processed one at a time.
    pub(super) suspects: Arc<HashSet<Origin>>,
    /// Input records that crashed it again after a restart: sent to the dead-letter
    /// topic unprocessed.
    pub(super) poisoned: Arc<HashSet<Origin>>,
    pub(super) dead_letters: bool,
    /// What the origins of records name.
    pub(super) source_topics: InputTopics,
    pub(super) metrics: OperatorMetrics,
    /// Where its state changes go at a checkpoint: the changelog, in the checkpoint's
    /// transaction. Each subtask writes its own, so the subtasks of a big checkpoint
    /// write in parallel; the store takes them once the checkpoint is committed.
    pub(super) changelog: ChangelogWriter<'a>,
    /// Snapshot rounds before the barrier, and the changes they wrote.
    pub(super) early: EarlyRounds,
    /// The last barrier the subtask passed (at the start, the checkpoint it restored).
    pub(super) barrier: u64,
}

/// Snapshot rounds between barriers. Once checkpoint N is committed, the changelog
/// records a subtask writes go into N+1's transaction; a subtask whose rounds take long
/// (a tenth of the interval, 50 ms at least, scaled to a whole interval between
/// barriers: the first checkpoint after a start covers a fraction of one) over many keys
/// hands its changes over every quarter or eighth interval from then on, so the barrier's
/// own round holds about the last quarter's or eighth's. A key changed in two rounds is
/// written twice, so early rounds stay off while a checkpoint's records are more than 3
/// per distinct key they change; whether they were on or not, that count is the same,
/// and so, about, is the rounds' time. Where they are at most 1.25 a key, keys seldom
/// come back within an interval, so rounds twice as often write little more, and come
/// every eighth. (The keys counted are the state's: an operator that keeps two entries
/// a record key, a window and a timer, counts each.) The rounds are counted from the
/// barrier, start to start (a round longer than its share is followed 20 ms after it
/// ends), and a round that would still
/// run when the next barrier reaches the subtask, an interval after the last did, is
/// left to that barrier: a barrier that finds the subtask in a round waits for it, and so
/// does every source that feeds the subtask, its channel full, and with them every other
/// subtask's barrier. How long a round would take is judged from the last round, early or
/// at the barrier, that wrote something over at least 20 ms of input: its time per second
/// of input it covered. A barrier the coordinator sends early, as fired output waits, can
/// still find the subtask in a round.
pub(super) struct EarlyRounds {
    interval: Duration,
    every: Duration,
    next: Instant,
    /// The last round's time, its write included, per second of input it covered.
    rate: f64,
    /// When the last round, early or at the barrier, began: the next covers the input since.
    snapshot: Instant,
    /// Whether the last checkpoint's changes make early rounds worth their repeats.
    on: bool,
    /// Rounds that take less than this in a checkpoint are left at the barrier.
    worth: Duration,
    /// The time this checkpoint's rounds took, their writes included.
    spent: Duration,
    /// When the subtask reached its last barrier: this checkpoint's rounds hold the input
    /// taken since.
    since: Instant,
    /// Early rounds whenever due (the crash tests': `fault::early_rounds_forced`).
    forced: bool,
    /// Records the subtask took since its last barrier.
    records: u64,
    /// Hashes of the keys this checkpoint's rounds changed, one key in `SAMPLE` (by
    /// hash): `SAMPLE` times their number estimates the distinct keys changed.
    sampled: HashSet<u32>,
    /// The changes early rounds of the next checkpoint wrote to the changelog, oldest first.
    held: Vec<StateChanges>,
    /// Their bytes, counted as a round's are ([`crate::operator::Limits::round_bytes`]).
    held_bytes: u64,
    /// Early rounds stop once they hold this much until the barrier, twice a round's
    /// bound: a plugin handing over a whole round each time holds the host to a few
    /// rounds' memory, not one per share of the interval. What stays in the guest goes
    /// with the barrier's round.
    max_held: u64,
}

/// Early rounds once a checkpoint's rounds changed at least this many distinct keys...
const EARLY_MIN_KEYS: u64 = 512;
/// ...with no more than this many records per distinct key changed...
const EARLY_RECORDS_PER_KEY: f64 = 3.0;
/// ...and took at least this long, or a tenth of the interval if longer.
const EARLY_MIN_SPENT: Duration = Duration::from_millis(50);
/// The shortest time between early rounds.
const EARLY_MIN_EVERY: Duration = Duration::from_millis(20);
/// A round's time per second of input is taken as at most this: a judgement, bounded.
const MAX_RATE: f64 = 1_000.0;
/// Early rounds every eighth interval, not every quarter, where a checkpoint's records
/// are at most this many per distinct key they change.
const EIGHTHS_RECORDS_PER_KEY: f64 = 1.25;
/// One changed key in this many is counted (by its hash's top bits, which the key
/// groups, taken from the low bits, leave evenly spread).
const SAMPLE: u32 = 8;

impl EarlyRounds {
    pub(super) fn new(interval: Duration, max_held: u64) -> EarlyRounds {
        let every = spacing(interval, f64::INFINITY);
        let forced = fault::early_rounds_forced();
        EarlyRounds {
            interval,
            every,
            next: Instant::now() + every,
            rate: 0.0,
            snapshot: Instant::now(),
            on: forced,
            worth: (interval / 10).max(EARLY_MIN_SPENT),
            spent: Duration::ZERO,
            since: Instant::now(),
            forced,
            records: 0,
            sampled: HashSet::new(),
            held: Vec::new(),
            held_bytes: 0,
            max_held,
        }
    }

    /// Asked after every batch: off, or not yet time, it judges nothing.
    fn due(&self, now: Instant) -> bool {
        if !self.on || now < self.next || self.held_bytes >= self.max_held {
            return false;
        }
        let would_take = (now - self.snapshot).mul_f64(self.rate);
        self.forced || now.checked_add(would_take).is_some_and(|end| end < self.since + self.interval)
    }

    /// A round that began at `started` took until `now`, and `wrote` something. One that
    /// wrote nothing, or covered less than `EARLY_MIN_EVERY` of input (a barrier right
    /// after an early round), says little of the next round: the rate stays.
    fn timed(&mut self, started: Instant, now: Instant, wrote: bool) {
        let covered = started.saturating_duration_since(self.snapshot);
        if wrote && covered >= EARLY_MIN_EVERY {
            self.rate = ((now - started).as_secs_f64() / covered.as_secs_f64()).min(MAX_RATE);
        }
        self.snapshot = started;
    }

    /// An early round that began at `started` is over at `now`: the next starts a
    /// round's share of the interval after it, or soon, if this one took longer.
    fn over(&mut self, started: Instant, now: Instant, wrote: bool) {
        self.timed(started, now, wrote);
        self.next = (started + self.every).max(now + EARLY_MIN_EVERY);
    }

    /// Counts a round's keys into the checkpoint's sample.
    fn note(&mut self, round: &StateChanges) {
        for (_, key, _) in round.entries() {
            let hash = murmur2(key);
            if (hash >> 29).is_multiple_of(SAMPLE) {
                self.sampled.insert(hash);
            }
        }
    }

    /// An early round wrote `round` in `took`: it goes to the store with the barrier's.
    fn hold(&mut self, round: StateChanges, took: Duration) {
        self.note(&round);
        self.spent += took;
        let (keys, bytes) = round.size();
        self.held_bytes += bytes + keys * chunk::ENTRY_OVERHEAD_BYTES as u64;
        self.held.push(round);
    }

    /// The time this checkpoint's rounds would have taken over an interval's input.
    fn spent_per_interval(&self) -> Duration {
        let covered = self.since.elapsed().max(EARLY_MIN_EVERY);
        self.spent.mul_f64(self.interval.as_secs_f64() / covered.as_secs_f64())
    }

    /// At a barrier: takes the checkpoint's rounds (`last`, the barrier's, written in
    /// `took`, at the end), and judges from the keys they changed and the time they took
    /// whether the next checkpoint has early rounds.
    fn take(&mut self, last: StateChanges, took: Duration) -> Vec<StateChanges> {
        self.note(&last);
        self.spent += took;
        let keys = self.sampled.len() as u64 * u64::from(SAMPLE);
        let projected = self.spent_per_interval();
        let worth = keys >= EARLY_MIN_KEYS && projected >= self.worth;
        let per_key = self.records as f64 / keys.max(1) as f64;
        self.on = self.forced || (worth && per_key <= EARLY_RECORDS_PER_KEY);
        self.every = spacing(self.interval, per_key);
        let (spent_ms, per_interval_ms) = (self.spent.as_millis() as u64, projected.as_millis() as u64);
        let every_ms = self.every.as_millis() as u64;
        tracing::debug!(keys, records = self.records, spent_ms, per_interval_ms, early_rounds = self.on, every_ms, "judged early snapshot rounds");
        self.records = 0;
        self.spent = Duration::ZERO;
        self.sampled.clear();
        let now = Instant::now();
        self.since = now.checked_sub(took).unwrap_or(now);
        self.timed(self.since, now, !last.is_empty());
        self.next = (self.since + self.every).max(now + EARLY_MIN_EVERY);
        let mut rounds = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        rounds.push(last);
        rounds
    }
}

/// How far apart early rounds start, for a checkpoint that took `per_key` records per
/// distinct key it changed.
fn spacing(interval: Duration, per_key: f64) -> Duration {
    let parts = if per_key <= EIGHTHS_RECORDS_PER_KEY { 8 } else { 4 };
    (interval / parts).max(EARLY_MIN_EVERY)
}

/// One channel into an operator subtask.
pub(super) struct InputChannel {
    pub(super) channel: Receiver<Message>,
    /// The operator input it belongs to: an index into the operator's `inputs`.
    pub(super) input: u32,
    /// A table input holds no watermark back.
    pub(super) table: bool,
}

impl OperatorTask<'_> {
    pub(super) fn run(mut self) -> Result<(), TaskFailure> {
        if self.shard.is_some() && self.watermark > i64::MIN {
            // Restored by a scaled-out process at its partitions' watermark, which may pass
            // windows their earlier owners had not fired yet: they fire now, not when the
            // watermark next moves (never, on quiet input).
            self.advance(self.watermark)?;
        }
        let inputs = std::mem::take(&mut self.inputs);
        let mut aligned = vec![false; inputs.len()];
        // `None`: the channel is idle, or a table's, and holds nothing back.
        let mut input_watermarks: Vec<Option<i64>> =
            inputs.iter().map(|input| (!input.table).then_some(i64::MIN)).collect();
        let mut idle = false;
        let mut loading = inputs.iter().filter(|input| input.table).count();
        loop {
            let mut select = Select::new();
            let open: Vec<usize> = (0..inputs.len()).filter(|&i| !aligned[i]).collect();
            for &i in &open {
                select.recv(&inputs[i].channel);
            }
            let ready = select.select();
            let input = open[ready.index()];
            let Ok(message) = ready.recv(&inputs[input].channel) else {
                return Ok(()); // an upstream task ended: the job is stopping
            };
            match message {
                Message::Records(records) => {
                    self.process(inputs[input].input, records)?;
                    self.early_round()?;
                }
                Message::Watermark(_) | Message::Idle if inputs[input].table => {}
                Message::TableEnd => {
                    loading -= 1;
                    if loading == 0 && let Some(bootstrap) = &self.bootstrap {
                        bootstrap.arrive();
                    }
                }
                Message::Watermark(watermark) => {
                    input_watermarks[input] = Some(watermark);
                    self.combine(&input_watermarks, &mut idle)?;
                }
                Message::Idle => {
                    input_watermarks[input] = None;
                    self.combine(&input_watermarks, &mut idle)?;
                }
                Message::Barrier(n) => {
                    aligned[input] = true;
                    if aligned.iter().all(|&a| a) {
                        self.checkpoint(n)?;
                        aligned.fill(false);
                    }
                }
                Message::DeadLetter(letter) => self.outputs[0].dead_letter(letter)?,
            }
        }
    }

    /// Hands `records` to the operator in batches no larger than a source's, whatever the
    /// operator before it returned in one call.
    fn process(&mut self, input: u32, records: Records) -> Result<(), TaskFailure> {
        self.metrics.records_in.inc_by(records.batch.len() as u64);
        self.early.records += records.batch.len() as u64;
        let ends = records.batch.piece_ends();
        if ends.len() <= 1 {
            return self.process_piece(input, records);
        }
        // One piece copied at a time: together they may hold far more than the batch,
        // whose records can share bytes.
        let mut start = 0;
        for end in ends {
            self.process_piece(input, records.piece(start..end))?;
            start = end;
        }
        Ok(())
    }

    fn process_piece(&mut self, input: u32, records: Records) -> Result<(), TaskFailure> {
        if records.origins.iter().any(|o| self.suspects.contains(o)) {
            return self.process_one_by_one(input, records);
        }
        match self.instance.process_input(input, &records.batch) {
            Ok(output) => self.emit(output),
            Err(error) => Err(TaskFailure::Operator { error: Box::new(error), origins: records.origins }),
        }
    }

    /// Processes a batch that holds a suspect record one record at a time, so the
    /// record that crashes the plugin again is found. A poisoned one (found so by an
    /// earlier attempt) goes to the dead-letter topic unprocessed. One that crashes
    /// now fails the attempt as `Poisoned`: the next attempt, restored from the last
    /// checkpoint, sets it aside, as a dead-letter topic is configured; without one,
    /// the job stops and names it.
    fn process_one_by_one(&mut self, input: u32, records: Records) -> Result<(), TaskFailure> {
        for index in 0..records.batch.len() {
            let origin = records.origins[index];
            let mut one = Records::default();
            one.push_from(&records, index);
            if self.poisoned.contains(&origin) {
                self.dead_letter(one, origin)?;
                continue;
            }
            match self.instance.process_input(input, &one.batch) {
                Ok(output) => self.emit(output)?,
                Err(error) if self.suspects.contains(&origin) => {
                    let error = error.to_string();
                    let (_, topic, partition) = self.source_topics.resolve(origin.partition);
                    let topic = topic.to_string();
                    if self.dead_letters {
                        return Err(TaskFailure::Poisoned { topic, partition, origin, error });
                    }
                    return Err(TaskFailure::Poison { topic, partition, origin, error });
                }
                Err(error) => return Err(TaskFailure::Operator { error: Box::new(error), origins: vec![origin] }),
            }
        }
        Ok(())
    }

    fn dead_letter(&self, one: Records, origin: Origin) -> Result<(), TaskFailure> {
        tracing::warn!(
            operator = %self.name, partition = kafka_partition(origin.partition), offset = origin.offset,
            "record crashed the plugin twice; sending it to the dead-letter topic"
        );
        let error = "the record crashed the plugin again after a restart".to_owned();
        let letter = DeadLetter { records: one, operator: self.name.clone(), error };
        self.outputs[0].dead_letter(letter)
    }

    /// Combines the inputs' watermarks (DESIGN.md §4): the least of the active ones
    /// moves this subtask's forward, never back, so an input that woke behind it holds
    /// it until the input catches up (its records behind it are late for the plugin).
    /// With every input idle, so is this subtask: it says so downstream once.
    fn combine(&mut self, inputs: &[Option<i64>], idle: &mut bool) -> Result<(), TaskFailure> {
        let Some(&least) = inputs.iter().flatten().min() else {
            if !std::mem::replace(idle, true) {
                self.marker(Message::Idle)?;
            }
            return Ok(());
        };
        let was_idle = std::mem::replace(idle, false);
        if least > self.watermark {
            return self.advance(least);
        }
        if was_idle {
            // Active again, at the event time it had reached.
            self.marker(Message::Watermark(self.watermark))?;
        }
        Ok(())
    }

    fn advance(&mut self, watermark: i64) -> Result<(), TaskFailure> {
        self.watermark = watermark;
        self.metrics.watermark.set(watermark);
        let output = self.instance.on_watermark_emitted(watermark).map_err(TaskFailure::operator)?;
        if !output.is_empty() && self.pace.fire() {
            // A wake-up only: with the channel full the coordinator sees the note anyway.
            let _ = self.events.try_send(Event::Fired);
        }
        self.emit(output)?;
        self.marker(Message::Watermark(watermark))
    }

    fn checkpoint(&mut self, n: u64) -> Result<(), TaskFailure> {
        fault::point(Step::PanicInOperator, n);
        let started = Instant::now();
        let mut changes = self.changes().map_err(TaskFailure::operator)?;
        self.changelog.write(n, &mut changes, &self.early.held)?;
        let changes: Vec<Arc<StateChanges>> = self.early.take(changes, started.elapsed()).into_iter().map(Arc::new).collect();
        self.changelog.keep(n, &changes);
        self.barrier = n;
        let bytes = layout::encode_operator(self.watermark);
        let task = TaskId::Operator { stage: self.stage, subtask: self.subtask };
        self.events
            .send(Event::State { n, task, bytes, offsets: None, changes })
            .map_err(|_| TaskFailure::Stopped)?;
        self.marker(Message::Barrier(n))
    }

    /// A snapshot round before the next barrier, when one is due and that checkpoint's
    /// transaction is open: its changes go into the changelog now, in that transaction,
    /// and to the store with the barrier's.
    fn early_round(&mut self) -> Result<(), TaskFailure> {
        let n = self.barrier + 1;
        let started = Instant::now();
        if !self.early.due(started) || !self.changelog.open_for(n) {
            return Ok(());
        }
        let mut changes = self.changes().map_err(TaskFailure::operator)?;
        let wrote = !changes.is_empty();
        if wrote {
            self.changelog.write(n, &mut changes, &self.early.held)?;
            fault::point_after(Step::InEarlyRound, n, || drop(self.changelog.deliver()));
            self.early.hold(changes, started.elapsed());
        }
        self.early.over(started, Instant::now(), wrote);
        Ok(())
    }

    /// One snapshot round: the guest's state changes since the last checkpoint, checked
    /// against the contract as `weir check` checks them (`OperatorInstance::snapshot_round`),
    /// and here also in a key group this subtask owns, with no state at all from an
    /// operator whose input is not routed by key.
    fn changes(&mut self) -> Result<StateChanges, OperatorError> {
        let (key_groups, owned, shard) = (&self.key_groups, &self.owned, &self.shard);
        let (name, subtask) = (&self.name, self.subtask);
        self.instance.snapshot_round(self.stage, |key| {
            let group = key_groups.group_of(Some(key));
            let Some(owned) = owned else { return Err(crate::job::unkeyed_state(name, key)) };
            if !owned.contains(&group) || shard.as_ref().is_some_and(|shard| !shard.owns(group)) {
                return Err(format!(
                    "key {} is in key group {group}, which subtask {subtask} does not own (it owns \
                     {owned:?}): state must be kept under the key of the records that change it",
                    chunk::shown_key(key)
                ));
            }
            Ok(group)
        })
    }

    /// Sends what one call emitted to the readers of each output.
    fn emit(&self, output: Emitted) -> Result<(), TaskFailure> {
        if output.is_empty() {
            return Ok(());
        }
        for (index, batch) in output.into_outputs(self.outputs.len()).into_iter().enumerate() {
            self.emit_to(index, batch)?;
        }
        Ok(())
    }

    /// Sends what the plugin emitted to its output `output` to every reader of it.
    fn emit_to(&self, output: usize, batch: Batch) -> Result<(), TaskFailure> {
        if batch.is_empty() {
            return Ok(());
        }
        self.metrics.records_out.inc_by(batch.len() as u64);
        let readers = &self.outputs[output];
        if readers.is_keyed()
            && let Some(shard) = &self.shard
        {
            self.check_keys_stay(shard, &batch)?;
        }
        readers.records(Records { batch, origins: Vec::new() })
    }

    /// A barrier, a watermark or idleness, down every channel of every output.
    fn marker(&self, marker: Message) -> Result<(), TaskFailure> {
        for readers in &self.outputs {
            readers.marker(&marker)?;
        }
        Ok(())
    }

    /// Scaled out, a record re-keyed into a key group of a partition another process may
    /// own cannot be routed: its state would be kept in two places.
    fn check_keys_stay(&self, shard: &Shard, output: &Batch) -> Result<(), TaskFailure> {
        for record in output.iter() {
            let group = self.key_groups.group_of(record.key);
            if !shard.owns(group) {
                let topic = self.source_topics.names();
                return Err(TaskFailure::Incompatible(shard.not_co_partitioned(&topic, group, None)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// Early rounds on at `now`, each taking `rate` seconds per second of input; the last
    /// barrier reached `barrier` before, the last round began `round` before.
    fn rounds(now: Instant, rate: f64, barrier: Duration, round: Duration) -> EarlyRounds {
        let mut early = EarlyRounds::new(Duration::from_secs(1), u64::MAX);
        (early.on, early.forced, early.rate) = (true, false, rate);
        (early.since, early.next, early.snapshot) = (now - barrier, now - barrier, now - round);
        early
    }

    /// An instant with a few seconds of monotonic time behind it.
    fn later() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    #[test]
    fn a_round_that_would_meet_the_next_barrier_is_left_to_it() {
        let now = later();
        assert!(rounds(now, 0.5, ms(500), ms(250)).due(now), "125 ms from 500 ms: done 375 ms before the barrier");
        assert!(!rounds(now, 0.5, ms(800), ms(500)).due(now), "250 ms from 800 ms: 50 ms past the barrier");
        assert!(rounds(now, 0.5, ms(800), ms(200)).due(now), "100 ms from 800 ms: a round covering less is quicker");
        assert!(!rounds(now, 0.0, ms(1_100), ms(100)).due(now), "the barrier is late: whatever comes is the barrier's");
        let mut off = rounds(now, 0.0, ms(500), ms(250));
        off.on = false;
        assert!(!off.due(now), "early rounds off");
        let mut forced = rounds(now, 0.5, ms(800), ms(500));
        forced.forced = true;
        assert!(forced.due(now), "the crash tests' rounds come whenever due");
    }

    #[test]
    fn early_rounds_stop_once_they_hold_a_rounds_bound() {
        let now = later();
        let mut early = rounds(now, 0.0, ms(500), ms(250));
        early.max_held = 2 * (2 + chunk::ENTRY_OVERHEAD_BYTES as u64);
        let one = || {
            let mut round = StateChanges::new(0);
            round.push(0, b"k", Some(b"v"));
            round
        };
        early.hold(one(), ms(1));
        assert!(early.due(now), "one round held, under the bound");
        early.hold(one(), ms(1));
        assert!(!early.due(now), "two held: the rest waits for the barrier");
        assert_eq!(early.take(one(), ms(1)).len(), 3);
        (early.on, early.next, early.since, early.rate) = (true, now, now - ms(100), 0.0);
        assert!(early.due(now), "the next checkpoint's rounds start from nothing held");
    }

    #[test]
    fn rounds_start_their_share_of_the_interval_apart_from_the_barrier() {
        let now = later();
        let mut early = rounds(now, 0.0, ms(300), ms(300));
        let started = now - ms(100);
        early.over(started, now, true);
        assert_eq!(early.next, started + early.every, "counted start to start");
        assert_eq!(early.rate, 0.5, "100 ms for the 200 ms of input since the last round began");
        assert_eq!(early.snapshot, started);

        let started = now - early.every * 2;
        early.over(started, now, true);
        assert_eq!(early.next, now + EARLY_MIN_EVERY, "a round longer than its share is followed 20 ms after it");

        let rounds = early.take(StateChanges::default(), ms(40));
        assert_eq!(rounds.len(), 1);
        assert_eq!(early.next, early.since + early.every, "a share of the interval after the barrier's round began");
        assert_eq!(early.snapshot, early.since, "the next round covers the input since the barrier's");
    }

    #[test]
    fn only_a_round_that_wrote_over_enough_input_sets_the_rate() {
        let now = later();
        let mut early = rounds(now, 0.5, ms(300), ms(300));
        early.over(now - ms(200), now, false);
        assert_eq!((early.rate, early.snapshot), (0.5, now - ms(200)), "a round that wrote nothing keeps the rate");
        early.over(now - ms(195), now, true);
        assert_eq!((early.rate, early.snapshot), (0.5, now - ms(195)), "5 ms of input says little: the rate stays");
        early.over(now - ms(100), now, true);
        assert_eq!(early.rate, 100.0 / 95.0, "100 ms for the 95 ms of input since the last round began");
    }

    #[test]
    fn rounds_come_every_eighth_where_keys_seldom_repeat() {
        let mut early = EarlyRounds::new(Duration::from_secs(1), u64::MAX);
        assert_eq!(early.every, ms(250), "a quarter until a checkpoint says otherwise");
        // 1 000 sampled keys stand for 8 000 distinct keys.
        let checkpoint = |early: &mut EarlyRounds, records: u64| {
            early.sampled.extend(0..1_000u32);
            early.records = records;
            early.take(StateChanges::default(), ms(100));
        };
        checkpoint(&mut early, 8_400);
        assert_eq!(early.every, ms(125), "1.05 records a key");
        assert!(early.on);
        checkpoint(&mut early, 12_000);
        assert_eq!(early.every, ms(250), "1.5 records a key");
        assert!(early.on);
        checkpoint(&mut early, 30_000);
        assert!(!early.on, "3.75 records a key: no early rounds");
        assert_eq!(spacing(ms(100), 1.0), EARLY_MIN_EVERY, "never closer than 20 ms");
    }

    #[test]
    fn the_barriers_round_sets_the_rate_and_a_long_one_is_followed_soon() {
        let mut early = EarlyRounds::new(Duration::from_secs(1), u64::MAX);
        let began = Instant::now() - ms(400);
        early.snapshot = began;
        let mut round = StateChanges::new(0);
        round.push(0, b"k", Some(b"v"));
        early.take(round, ms(300));
        assert!(early.rate > 0.5 && early.rate <= 3.0, "300 ms for the 100 ms (and the test's own time) of input before it: {}", early.rate);
        assert!(early.next > early.since + early.every, "a barrier's round longer than its share is followed 20 ms after it");
    }
}
