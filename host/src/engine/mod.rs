//! The engine: turns a job into running tasks and keeps it running. `restart.rs` is the
//! supervision loop's policy; one attempt recovers from the last committed checkpoint
//! (`recover.rs`), wires sources → operator subtasks → sink with bounded channels
//! (`graph.rs`) and lets the coordinator drive checkpoints (`coordinator.rs`).

mod coordinator;
mod fault;
mod graph;
mod group;
mod operator_task;
mod recover;
mod restart;
mod watchdog;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::checkpoint::store::CheckpointStore;
use crate::job::Job;
use crate::metrics::Metrics;
use crate::operator::Plugin;
use coordinator::Outcome;
use restart::RestartBudget;

pub use crate::dataflow::{Origin, TaskFailure};

/// What the engine needs beyond the job file.
pub struct Options {
    pub stop: Arc<AtomicBool>,
    pub metrics: Metrics,
}

/// The loaded, validated pieces that live as long as the process.
pub struct Engine {
    job: Job,
    plugins: Vec<Plugin>,
    store: CheckpointStore,
    options: Options,
}

impl Engine {
    pub fn new(job: Job, plugins: Vec<Plugin>, store: CheckpointStore, options: Options) -> Engine {
        assert_eq!(plugins.len(), job.operators.len(), "one plugin per operator");
        Engine { job, plugins, store, options }
    }

    /// Runs the job until a stop is requested (then returns Ok after a final commit)
    /// or it fails in a way a restart cannot cure.
    pub fn run(&self) -> Result<(), TaskFailure> {
        if self.job.scale_out {
            return group::run(self);
        }
        let mut records = Records::default();
        let mut restarts = RestartBudget::new(&self.job.restarts);
        let mut started_once = false;
        loop {
            let failure = match self.attempt(&records, &mut started_once) {
                Ok(Outcome::Stopped) => return Ok(()),
                Err(failure) => failure,
            };
            if failure.is_fatal() || !started_once {
                return Err(failure);
            }
            if let TaskFailure::Operator { origins, .. } = &failure {
                records.suspects.extend(origins.iter().copied());
            }
            if let TaskFailure::Poisoned { origin, .. } = &failure {
                // Progress, not a fault: each record is found once, so the budget stays.
                tracing::warn!("{failure}");
                records.poisoned.insert(*origin);
                continue;
            }
            let Some(backoff) = restarts.next_backoff() else {
                tracing::error!("{}; giving up", restarts.describe_budget());
                return Err(failure);
            };
            self.options.metrics.restarts().inc();
            tracing::warn!("attempt failed: {failure}; restarting from the last committed checkpoint in {backoff:?}");
            std::thread::sleep(backoff);
        }
    }

    /// One attempt: recover, then run the task graph until the coordinator returns.
    fn attempt(&self, records: &Records, started_once: &mut bool) -> Result<Outcome, TaskFailure> {
        let recovered = recover::recover(&self.job, &self.plugins, &self.store, &self.options.metrics)?;
        *started_once = true;
        graph::execute(self, recovered, records, &self.options.stop, None)
    }
}

/// Input records that failed earlier attempts.
#[derive(Clone, Default)]
struct Records {
    /// Made the plugin fail once: processed one at a time.
    suspects: HashSet<Origin>,
    /// Made it fail again after a restart: sent to the dead-letter topic unprocessed.
    poisoned: HashSet<Origin>,
}
