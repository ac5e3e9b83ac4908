//! The checkpoint coordinator: every interval it injects barrier N into the sources,
//! gathers every task's entry into the store (operator subtasks have written their
//! keyed state changes to the changelog themselves), writes the checkpoint record to
//! the changelog in N's Kafka transaction, seals N in the store (synced), and makes
//! the Kafka transaction commit the single decision point for N (DESIGN.md §2). Just
//! before the commit it reads where the changelog partitions N wrote end; once N is
//! committed, the folder (`graph.rs`) folds N's changes into the store's state with
//! those positions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::checkpoint::layout;
use crate::checkpoint::store::{Checkpoint, CheckpointStore};
use crate::chunk::StateChanges;
use crate::dataflow::{Event, InputTopics, Pace, TaskFailure};
use crate::metrics::Metrics;
use crate::metrics::history::CheckpointEntry;
use crate::sink::{self, Sink};
use crate::source::Control;
use crate::state::changelog;

use super::fault::{self, Step};
use super::folder::{Fold, Handover};
use super::watchdog::Watchdog;

/// How soon after it starts an attempt commits its first checkpoint (at most): after a
/// restart, or in a scaled-out process that took partitions over, output shows again
/// without waiting a whole interval.
const FIRST_CHECKPOINT: Duration = Duration::from_millis(100);
/// How often the idle coordinator looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
/// How often it looks whether the sources have caught up while results wait.
const CATCH_UP_POLL: Duration = Duration::from_millis(5);
/// An early checkpoint starts at least this share of the interval after the last one
/// (1 in `EARLY_SHARE`): checkpoints come at most this many times as often.
const EARLY_SHARE: u32 = 4;

pub(super) struct Coordinator<'a> {
    pub(super) store: &'a CheckpointStore,
    pub(super) sink: &'a Sink,
    /// What the input partitions' ids stand for.
    pub(super) inputs: &'a InputTopics,
    /// Where every checkpoint's state changes go, in its transaction.
    pub(super) changelog_topic: &'a str,
    pub(super) sources: Vec<Sender<Control>>,
    pub(super) events: Receiver<Event>,
    pub(super) committed: Sender<u64>,
    /// The last checkpoint committed, for the operator subtasks: once N is, they may write
    /// state changes of N+1 into its open transaction before its barrier.
    pub(super) committed_through: &'a AtomicU64,
    /// With exactly-once: whether results wait for a commit while the sources have
    /// caught up, when the next checkpoint starts early for them.
    pub(super) pace: Option<&'a Pace>,
    /// Checkpoints committed, for the folder to fold into the store's state.
    pub(super) folds: Handover,
    /// The folder's word that it has folded a checkpoint, when checkpoints wait for
    /// folds (at-least-once: see `await_fold`).
    pub(super) folded: Option<Receiver<u64>>,
    /// The checkpoint handed to the folder and not yet folded, when checkpoints wait.
    pub(super) fold_in_flight: Option<u64>,
    /// Reads where the changelog's partitions end.
    pub(super) changelog_ends: changelog::Ends,
    /// Which changelog partition holds each key group.
    pub(super) placement: changelog::Placement,
    /// Per changelog partition, an offset at or before the first record of the next
    /// checkpoint: stored with each fold, so recovery replays only what follows.
    pub(super) positions: BTreeMap<i32, i64>,
    /// How many `State` events make a checkpoint complete: sources plus operator subtasks.
    pub(super) expected_states: usize,
    pub(super) interval: Duration,
    /// A checkpoint not complete within this is a failure of the attempt.
    pub(super) timeout: Duration,
    /// Written with every checkpoint: what recovery checks the job against.
    pub(super) meta: Vec<u8>,
    pub(super) next: u64,
    pub(super) stop: Arc<AtomicBool>,
    /// Set when the attempt must end without another checkpoint (a scaled-out process
    /// that lost its partitions: a commit now could land after others took them).
    pub(super) abandon: Option<Arc<AtomicBool>>,
    /// A process of a scaled-out job: it writes no checkpoint record (the changelog's
    /// partitions are shared by the job's processes) and keeps no checkpoint entries in
    /// the store (it recovers from Kafka; the store caches only its key groups' state).
    pub(super) scaled_out: bool,
    /// Whether the job has a changelog (an operator keeps keyed state): a single
    /// process writes each checkpoint's record into it.
    pub(super) keeps_state: bool,
    pub(super) metrics: &'a Metrics,
    /// Bounds each Kafka commit, which librdkafka may not.
    pub(super) watchdog: Watchdog,
}

/// Why the coordinator stopped.
pub(super) enum Outcome {
    /// A stop was requested and a final checkpoint committed.
    Stopped,
}

impl Coordinator<'_> {
    /// Ends the coordinator, dropping its channel ends (the tasks then end too),
    /// but for the events the tasks still send. The folder gets the folds it has not
    /// taken yet.
    pub(super) fn into_events(self) -> Receiver<Event> {
        self.folds.finish();
        self.events
    }

    pub(super) fn run(&mut self) -> Result<Outcome, TaskFailure> {
        if let Some(resumed) = self.next.checked_sub(1).filter(|&n| n > 0) {
            self.metrics.resumed(resumed);
        }
        let mut due = Instant::now() + self.interval.min(FIRST_CHECKPOINT);
        let mut earliest = Instant::now();
        loop {
            let stopping = self.idle_until(due, earliest)?;
            // The interval runs from one barrier to the next, as in Flink: a checkpoint
            // that took part of it does not delay the next one.
            let started = Instant::now();
            due = started + self.interval;
            earliest = started + self.interval / EARLY_SHARE;
            let n = self.next;
            if let Err(failure) = self.checkpoint(n) {
                // Stopped: the attempt ends for another reason (a rebalance), not this checkpoint.
                if !matches!(failure, TaskFailure::Stopped) {
                    self.metrics.history().failed(n, started.elapsed(), &failure);
                }
                return Err(failure);
            }
            self.next += 1;
            if stopping {
                return Ok(Outcome::Stopped);
            }
        }
    }

    /// Waits until `due`, or only until `earliest` once results wait and the sources
    /// have caught up (`Pace`); a task failure ends the wait. Returns true when a stop
    /// was requested (a final checkpoint is then due at once).
    fn idle_until(&mut self, due: Instant, earliest: Instant) -> Result<bool, TaskFailure> {
        loop {
            if self.abandoned() {
                return Err(TaskFailure::Stopped);
            }
            if self.stop.load(Ordering::Relaxed) {
                return Ok(true);
            }
            self.folds.offer()?;
            let now = Instant::now();
            let waiting = self.pace.is_some_and(Pace::waiting);
            let due = if self.pace.is_some_and(Pace::wants_checkpoint) { due.min(earliest) } else { due };
            if now >= due {
                return Ok(false);
            }
            let poll = if waiting { CATCH_UP_POLL } else { STOP_POLL };
            match self.events.recv_timeout((due - now).min(poll)) {
                Ok(event) => between_checkpoints(event)?,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(TaskFailure::Stopped),
            }
        }
    }

    fn checkpoint(&mut self, n: u64) -> Result<(), TaskFailure> {
        let started = Instant::now();
        self.await_fold()?;
        // A state_dir deleted under the job: the store would fail at its next new file,
        // and every checkpoint folded meanwhile would be lost with it.
        self.store.check_present()?;
        if let Some(pace) = self.pace {
            pace.barrier();
        }
        for source in &self.sources {
            source.send(Control::Barrier(n)).map_err(|_| TaskFailure::Stopped)?;
        }
        fault::point(Step::AfterBarrier, n);

        // From the barrier: an at-least-once wait for the folder is no part of the bound.
        let deadline = Instant::now() + self.timeout;
        let mut tasks = BTreeMap::new();
        let mut offsets = BTreeMap::new();
        let mut sink_aligned = false;
        let mut changes = Vec::new();
        // Snapshot rounds the operator subtasks wrote before the barrier (each task's
        // last round is the barrier's).
        let mut early_rounds = 0;

        while tasks.len() < self.expected_states || !sink_aligned {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::State { n: m, task, bytes, offsets: reached, changes: by_task }) => {
                    assert_eq!(m, n, "{task} sent state for checkpoint {m} during {n}");
                    let task = task.to_string();
                    if !self.scaled_out {
                        self.store.put(n, &task, &bytes).map_err(TaskFailure::Store)?;
                    }
                    early_rounds += by_task.len().saturating_sub(1);
                    changes.extend(by_task.into_iter().filter(|c| !c.is_empty()));
                    for state in reached.into_iter().flatten() {
                        offsets.insert(state.partition, state);
                    }
                    tasks.insert(task, bytes);
                }
                Ok(Event::SinkAligned(m)) => {
                    assert_eq!(m, n, "the sink aligned checkpoint {m} during {n}");
                    sink_aligned = true;
                }
                // Noted in `Pace`: the next wait looks there.
                Ok(Event::Fired) => {}
                Ok(Event::Failed(failure)) => return Err(failure),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(TaskFailure::CheckpointTimeout { n, timeout: self.timeout });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(TaskFailure::Stopped),
            }
        }

        let gathered = started.elapsed();
        let checkpoint = Checkpoint { n, meta: self.meta.clone(), tasks };
        if !self.scaled_out && self.keeps_state {
            let record = layout::checkpoint_record(&checkpoint);
            self.sink.send_checkpoint_record(self.changelog_topic, &record)?;
        }
        let size = self.seal(&checkpoint)?;
        let sealed = started.elapsed() - gathered;
        fault::point(Step::AfterSeal, n);
        if !changes.is_empty() {
            // Flushed first: the kill finds the changes in the changelog, not in a queue.
            fault::point_after(Step::AfterChangesSealed, n, || drop(self.sink.flush_pending()));
        }
        tracing::debug!(checkpoint = n, "checkpoint sealed; committing it in Kafka");
        // Before the commit: records another instance wrote after fencing this one may be
        // among these ends, but then this commit fails and nothing is folded; and nothing
        // of n+1 is written yet. Records of n not yet flushed may lie past them, which only
        // makes a replay read them again.
        let timer = Instant::now();
        self.advance_positions(&changes)?;
        let ends_time = timer.elapsed();

        if self.abandoned() {
            // The process lost its partitions while this checkpoint was gathered.
            return Err(TaskFailure::Stopped);
        }
        fault::slow_commit();
        let what = format!("the Kafka commit of checkpoint {n}");
        let timer = Instant::now();
        self.watchdog
            .guard(what, sink::COMMIT_BOUND, || self.sink.commit(n, self.inputs, &offsets))?;
        let commit_time = timer.elapsed();
        self.metrics.dead_letter_records().inc_by(self.sink.take_dead_letters());
        fault::point(Step::AfterCommit, n);
        self.committed_through.store(n, Ordering::Release);
        self.committed.send(n).map_err(|_| TaskFailure::Stopped)?;

        let (changed, changed_bytes) =
            changes.iter().map(|c| c.size()).fold((0, 0), |(e, b), (de, db)| (e + de, b + db));
        let (records, record_bytes) = changes.iter().map(|c| c.written).fold((0, 0), |(r, b), (dr, db)| (r + dr, b + db));
        let bases: u32 = changes.iter().map(|c| c.bases).sum();
        let fold = Fold { first: n, n, changes, positions: self.positions.clone() };
        self.folds.hand(fold)?;
        self.fold_in_flight = self.folded.is_some().then_some(n);
        let duration = started.elapsed();
        self.metrics.checkpoint().committed(n, duration, size + changed_bytes);
        self.metrics.checkpoint().state_changes(changed, changed_bytes);
        self.metrics.history().committed(CheckpointEntry {
            state_changes: changed,
            changelog_records: records,
            changelog_bytes: record_bytes,
            bases,
            ..CheckpointEntry::began(n, duration)
        });
        tracing::info!(
            checkpoint = n,
            duration_ms = duration.as_millis() as u64,
            bytes = size + changed_bytes,
            state_changes = changed,
            changelog_records = records,
            changelog_bytes = record_bytes,
            bases,
            early_rounds,
            partitions = offsets.len(),
            gathered_ms = gathered.as_millis() as u64,
            sealed_ms = sealed.as_millis() as u64,
            ends_ms = ends_time.as_millis() as u64,
            commit_ms = commit_time.as_millis() as u64,
            "checkpoint committed"
        );
        Ok(())
    }

    /// Seals the checkpoint's task entries in the store; returns their size. A
    /// scaled-out process keeps none: it recovers from Kafka alone.
    fn seal(&self, checkpoint: &Checkpoint) -> Result<u64, TaskFailure> {
        if self.scaled_out {
            return Ok(checkpoint.tasks.values().map(|bytes| bytes.len() as u64).sum());
        }
        let names: Vec<&str> = checkpoint.tasks.keys().map(String::as_str).collect();
        self.store.seal(checkpoint.n, &names, &self.meta).map_err(TaskFailure::Store)
    }

    /// At-least-once: waits until the previous checkpoint is folded into the store. Its
    /// changes are the changelog's last then, so a replay from the store's positions
    /// after a crash reads nothing of a later checkpoint, whose records an at-least-once
    /// changelog shows before their commit (read_committed hides them from an
    /// exactly-once replay). A task failure ends the wait.
    fn await_fold(&mut self) -> Result<(), TaskFailure> {
        let (Some(n), Some(folded)) = (self.fold_in_flight.take(), &self.folded) else { return Ok(()) };
        loop {
            crossbeam_channel::select! {
                recv(folded) -> folded => match folded {
                    Ok(m) => {
                        debug_assert_eq!(m, n, "the folder folded {m} while {n} was in flight");
                        return Ok(());
                    }
                    Err(_) => return Err(TaskFailure::Stopped),
                },
                recv(self.events) -> event => match event {
                    Ok(event) => between_checkpoints(event)?,
                    Err(_) => return Err(TaskFailure::Stopped),
                },
            }
        }
    }

    /// Whether the process lost its partitions: the attempt must end without another
    /// checkpoint.
    fn abandoned(&self) -> bool {
        self.abandon.as_ref().is_some_and(|abandon| abandon.load(Ordering::Relaxed))
    }

    /// Moves the positions of the changelog partitions a checkpoint wrote to where they
    /// end now.
    fn advance_positions(&mut self, changes: &[Arc<StateChanges>]) -> Result<(), TaskFailure> {
        let placement = self.placement;
        let written: BTreeSet<i32> = changes.iter().flat_map(|c| c.groups()).map(|group| placement.partition_of(group)).collect();
        if written.is_empty() {
            return Ok(());
        }
        self.positions.extend(self.changelog_ends.of(&written)?);
        Ok(())
    }
}

/// Takes an event that came while no checkpoint is in flight: a timer that fired (noted
/// in `Pace`) or a task's failure; state or alignment then is a defect of the tasks.
fn between_checkpoints(event: Event) -> Result<(), TaskFailure> {
    match event {
        Event::Fired => Ok(()),
        Event::Failed(failure) => Err(failure),
        Event::State { n, task, .. } => unreachable!("{task} sent state for checkpoint {n} while none was in flight"),
        Event::SinkAligned(n) => unreachable!("the sink aligned {n} while no checkpoint was in flight"),
    }
}
