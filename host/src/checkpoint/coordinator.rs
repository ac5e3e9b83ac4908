//! The checkpoint coordinator: every interval it injects barrier N into the sources,
//! gathers every task's state into the store, seals it (synced), and makes the Kafka
//! transaction commit the single decision point for N (DESIGN.md §2).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::checkpoint::fault::{self, Step};
use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::watchdog::Watchdog;
use crate::engine::TaskFailure;
use crate::metrics::Metrics;
use crate::sink::{self, Sink};
use crate::source::{Control, PartitionState};

/// How often the idle coordinator looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

/// What tasks tell the coordinator.
pub enum Event {
    /// A task's state for checkpoint `n`; sources add the offsets they reached.
    State { n: u64, task: String, bytes: Vec<u8>, offsets: Option<Vec<PartitionState>> },
    /// The sink has handed every record of epoch `n` to the producer.
    SinkAligned(u64),
    Failed(TaskFailure),
}

pub struct Coordinator<'a> {
    pub store: &'a CheckpointStore,
    pub sink: &'a Sink,
    pub source_topic: &'a str,
    pub sources: Vec<Sender<Control>>,
    pub events: Receiver<Event>,
    pub committed: Sender<u64>,
    /// How many `State` events make a checkpoint complete: sources plus operator subtasks.
    pub expected_states: usize,
    pub interval: Duration,
    /// A checkpoint not complete within this is a failure of the attempt.
    pub timeout: Duration,
    /// Written with every checkpoint: what recovery checks the job against.
    pub meta: Vec<u8>,
    pub next: u64,
    pub stop: Arc<AtomicBool>,
    pub metrics: &'a Metrics,
    /// Bounds each Kafka commit, which librdkafka may not.
    pub watchdog: Watchdog,
}

/// Why the coordinator stopped.
pub enum Outcome {
    /// A stop was requested and a final checkpoint committed.
    Stopped,
}

impl Coordinator<'_> {
    pub fn run(&mut self) -> Result<Outcome, TaskFailure> {
        let mut due = Instant::now() + self.interval;
        loop {
            let stopping = self.idle_until(due)?;
            // The interval runs from one barrier to the next, as in Flink: a checkpoint
            // that took part of it does not delay the next one.
            due = Instant::now() + self.interval;
            let n = self.next;
            self.checkpoint(n)?;
            self.next += 1;
            if stopping {
                return Ok(Outcome::Stopped);
            }
        }
    }

    /// Waits until `due`; a task failure ends the wait. Returns true when a stop was
    /// requested (a final checkpoint is then due at once).
    fn idle_until(&self, due: Instant) -> Result<bool, TaskFailure> {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= due {
                return Ok(false);
            }
            match self.events.recv_timeout((due - now).min(STOP_POLL)) {
                Ok(Event::Failed(failure)) => return Err(failure),
                Ok(Event::State { n, task, .. }) => {
                    unreachable!("{task} sent state for checkpoint {n} while none was in flight")
                }
                Ok(Event::SinkAligned(n)) => unreachable!("the sink aligned {n} while no checkpoint was in flight"),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(TaskFailure::Stopped),
            }
        }
    }

    fn checkpoint(&mut self, n: u64) -> Result<(), TaskFailure> {
        let started = Instant::now();
        for source in &self.sources {
            source.send(Control::Barrier(n)).map_err(|_| TaskFailure::Stopped)?;
        }
        fault::point(Step::AfterBarrier, n);

        let deadline = started + self.timeout;
        let mut tasks = Vec::with_capacity(self.expected_states);
        let mut offsets = BTreeMap::new();
        let mut sink_aligned = false;
        while tasks.len() < self.expected_states || !sink_aligned {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::State { n: m, task, bytes, offsets: reached }) => {
                    assert_eq!(m, n, "{task} sent state for checkpoint {m} during {n}");
                    self.store.put(n, &task, &bytes).map_err(TaskFailure::Store)?;
                    for state in reached.into_iter().flatten() {
                        offsets.insert(state.partition, state.next_offset);
                    }
                    tasks.push(task);
                }
                Ok(Event::SinkAligned(m)) => {
                    assert_eq!(m, n, "the sink aligned checkpoint {m} during {n}");
                    sink_aligned = true;
                }
                Ok(Event::Failed(failure)) => return Err(failure),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(TaskFailure::CheckpointTimeout { n, timeout: self.timeout });
                }
                Err(RecvTimeoutError::Disconnected) => return Err(TaskFailure::Stopped),
            }
        }

        let names: Vec<&str> = tasks.iter().map(String::as_str).collect();
        let size = self.store.seal(n, &names, &self.meta).map_err(TaskFailure::Store)?;
        fault::point(Step::AfterSeal, n);
        tracing::debug!(checkpoint = n, "checkpoint sealed; committing it in Kafka");

        let what = format!("the Kafka commit of checkpoint {n}");
        self.watchdog
            .guard(what, sink::COMMIT_BOUND, || self.sink.commit(n, self.source_topic, &offsets))
            .map_err(TaskFailure::Sink)?;
        fault::point(Step::AfterCommit, n);
        self.committed.send(n).map_err(|_| TaskFailure::Stopped)?;

        self.store.prune_before(n).map_err(TaskFailure::Store)?;
        let duration = started.elapsed();
        self.metrics.checkpoint().committed(n, duration, size);
        tracing::info!(
            checkpoint = n,
            duration_ms = duration.as_millis() as u64,
            bytes = size,
            partitions = offsets.len(),
            "checkpoint committed"
        );
        Ok(())
    }
}
