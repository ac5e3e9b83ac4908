//! The engine: turns a job into running tasks and keeps it running. `restart.rs` is the
//! supervision loop's policy; one attempt recovers from the last committed checkpoint
//! (`recover.rs`), wires sources → operator subtasks → sink with bounded channels
//! (`graph.rs`) and lets the coordinator drive checkpoints (`coordinator.rs`).

mod coordinator;
pub(crate) mod fault;
mod folder;
mod graph;
mod group;
mod operator_task;
mod recover;
mod restart;
mod watchdog;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::sync::atomic::AtomicBool;

use crate::checkpoint::state_dir::StateDir;
use crate::checkpoint::store::CheckpointStore;
use crate::job::Job;
use crate::metrics::Metrics;
use crate::metrics::history::Phase;
use crate::operator::{OperatorInstance, Plugin};
use coordinator::Outcome;
use restart::RestartBudget;

pub use crate::dataflow::{Origin, TaskFailure};

/// How a run asked to stop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// After a final commit of what it had read, or with nothing running to commit.
    Committed,
    /// A scaled-out process the group had moved on from: its final checkpoint could not
    /// commit, and whoever owns its partitions now goes on from their last committed one.
    Handed,
}

/// What the engine needs beyond the job file.
pub struct Options {
    pub stop: Arc<AtomicBool>,
    pub metrics: Metrics,
}

/// The loaded, validated pieces that live as long as the process.
pub struct Engine {
    job: Job,
    plugins: Vec<Plugin>,
    store: Mutex<Store>,
    options: Options,
}

/// The checkpoint store and its directory: an attempt borrows the store; one that
/// failed on it leaves it to be opened anew before the next.
struct Store {
    dir: StateDir,
    open: Option<CheckpointStore>,
}

impl Engine {
    pub fn new(job: Job, plugins: Vec<Plugin>, state_dir: (StateDir, CheckpointStore), options: Options) -> Engine {
        assert_eq!(plugins.len(), job.operators.len(), "one plugin per operator");
        let (dir, store) = state_dir;
        Engine { job, plugins, store: Mutex::new(Store { dir, open: Some(store) }), options }
    }

    /// Runs `attempt` with the checkpoint store, opened anew first when the last attempt
    /// failed on it or its directory was deleted. A directory deleted while the job
    /// runs is a lost state_dir: it comes back empty and recovery rebuilds it from the
    /// changelog. One attempt runs at a time.
    fn with_store<T>(&self, attempt: impl FnOnce(&CheckpointStore) -> Result<T, TaskFailure>) -> Result<T, TaskFailure> {
        let mut slot = self.store.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(Err(gone)) = slot.open.as_ref().map(CheckpointStore::check_present) {
            tracing::warn!("{gone}");
            slot.open = None;
        }
        if slot.open.is_none() {
            let store = slot.dir.reopen()?;
            tracing::info!(state_dir = %slot.dir.store_dir().display(), "opened the checkpoint store anew");
            slot.open = Some(store);
        }
        let mut result = attempt(slot.open.as_ref().expect("opened above"));
        if let Err(TaskFailure::Store(error)) = &result {
            tracing::debug!("the checkpoint store is opened anew before the next attempt: {error}");
            // A store deleted under the attempt fails however RocksDB noticed: say so.
            if let Some(Err(gone)) = slot.open.as_ref().map(CheckpointStore::check_present) {
                result = Err(TaskFailure::Store(gone));
            }
            slot.open = None;
        }
        result
    }

    /// Runs the job until a stop is requested (then says how it ended) or it fails in a
    /// way a restart cannot cure.
    pub fn run(&self) -> Result<Stopped, TaskFailure> {
        self.check_operators()?;
        if self.job.scale_out {
            return group::run(self);
        }
        let mut records = Records::default();
        let mut restarts = RestartBudget::new(&self.job.restarts);
        let mut started_once = false;
        loop {
            let failure = match self.attempt(&records, &mut started_once) {
                Ok(Outcome::Stopped) => return Ok(Stopped::Committed),
                Err(failure) => failure,
            };
            // A first recovery that fails stops the job (a broker out of reach at the start
            // is a mistake to report, not to wait out), unless its state_dir was deleted
            // under it: the next attempt opens it anew, as after any later deletion.
            if failure.is_fatal() || !(started_once || failure.is_store_vanished()) {
                return Err(failure);
            }
            if let TaskFailure::Operator { origins, .. } = &failure {
                records.suspects.extend(origins.iter().copied());
            }
            if let TaskFailure::Poisoned { origin, .. } = &failure {
                // Progress, not a fault: each record is found once, so the budget stays.
                tracing::warn!("{failure}");
                self.options.metrics.restarted(&failure, std::time::Duration::ZERO, false);
                records.poisoned.insert(*origin);
                continue;
            }
            let Some(backoff) = restarts.next_backoff() else {
                tracing::error!("{}; giving up", restarts.describe_budget());
                return Err(failure);
            };
            self.options.metrics.restarted(&failure, backoff, true);
            tracing::warn!("attempt failed: {failure}; restarting from the last committed checkpoint in {backoff:?}");
            std::thread::sleep(backoff);
        }
    }

    /// Instantiates and initialises every operator once, with its config and limits,
    /// before the job touches Kafka: a bad config or a failing `init` stops the job
    /// before it creates any topic.
    fn check_operators(&self) -> Result<(), TaskFailure> {
        for (spec, plugin) in self.job.operators.iter().zip(&self.plugins) {
            let label = format!("{}[check]", spec.name);
            OperatorInstance::with_ports(plugin, spec.limits(), spec.init_config(), spec.ports(), label)
                .map_err(TaskFailure::operator)?;
        }
        Ok(())
    }

    /// One attempt: recover, then run the task graph until the coordinator returns.
    fn attempt(&self, records: &Records, started_once: &mut bool) -> Result<Outcome, TaskFailure> {
        self.options.metrics.history().phase(Phase::Recovering);
        self.with_store(|store| {
            let recovered = recover::recover(&self.job, &self.plugins, store, &self.options.metrics)?;
            *started_once = true;
            graph::execute(self, store, recovered, records, &self.options.stop, None)
        })
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
