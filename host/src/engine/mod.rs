//! The engine: turns a job into running tasks and keeps it running. One attempt
//! recovers from the last committed checkpoint, wires sources → operator subtasks →
//! sink with bounded channels, and lets the coordinator drive checkpoints; a failed
//! attempt is restarted in-process with backoff until the restart budget is spent.

pub mod message;
pub mod operator_task;
pub mod route;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};
use serde::{Deserialize, Serialize};

use crate::checkpoint::coordinator::{Coordinator, Event, Outcome};
use crate::checkpoint::fault::{self, Step};
use crate::checkpoint::recovery::{self, RecoveryError};
use crate::checkpoint::store::{Checkpoint, CheckpointStore, StoreError};
use crate::job::{self, Job};
use crate::metrics::Metrics;
use crate::operator::{Limits, LogLimits, OperatorError, OperatorInstance, Plugin};
use crate::sink::{Delivery, Sink, SinkConfig, SinkError, SinkTask};
use crate::source::{self, Control, PartitionState, SourceTask};
use message::{Message, Origin};
use operator_task::OperatorTask;

/// Batches a channel holds: bounds memory and makes a slow stage push back.
const CHANNEL_BATCHES: usize = 16;
/// How long Kafka may take to answer at start-up before the job gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why one task, and so the attempt, failed.
#[derive(Debug, thiserror::Error)]
pub enum TaskFailure {
    /// A channel closed because another task ended first; never the root cause.
    #[error("stopped because another task of the job stopped")]
    Stopped,
    #[error("Kafka: {0}")]
    Kafka(String),
    #[error("{error}")]
    Operator { error: OperatorError, origins: Vec<Origin> },
    #[error(
        "record {topic}/{partition}@{offset} crashed the plugin again after a restart: {error}; \
         set [sink].dead_letter_topic to divert such records and keep the job running",
        partition = origin.partition, offset = origin.offset
    )]
    Poison { topic: String, origin: Origin, error: String },
    #[error("{0}")]
    Sink(SinkError),
    #[error("{0}")]
    Store(StoreError),
    #[error("checkpoint {n} did not complete within {}s", timeout.as_secs())]
    CheckpointTimeout { n: u64, timeout: Duration },
    #[error("{0}")]
    Recovery(RecoveryError),
    #[error("{0}")]
    Incompatible(String),
    #[error("{0}")]
    OffsetLost(String),
    /// A bug in weir, not in the job: the task's thread panicked.
    #[error("{task} panicked: {message}; this is a bug in weir: please report it with this log")]
    Panicked { task: String, message: String },
}

impl TaskFailure {
    pub fn operator(error: OperatorError) -> TaskFailure {
        TaskFailure::Operator { error, origins: Vec::new() }
    }

    /// Failures a restart cannot cure: the job must stop and say why.
    fn is_fatal(&self) -> bool {
        match self {
            TaskFailure::Poison { .. } | TaskFailure::Incompatible(_) | TaskFailure::OffsetLost(_) => true,
            TaskFailure::Sink(e) => e.is_fenced(),
            TaskFailure::Store(e) => !matches!(e, StoreError::Rocks { .. }),
            TaskFailure::Recovery(e) => !matches!(e, RecoveryError::Unreachable { .. } | RecoveryError::Offsets { .. }),
            TaskFailure::Operator { error, .. } => matches!(error, OperatorError::Init { .. } | OperatorError::Instantiate { .. }),
            TaskFailure::Stopped
            | TaskFailure::Kafka(_)
            | TaskFailure::CheckpointTimeout { .. }
            | TaskFailure::Panicked { .. } => false,
        }
    }
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
    store: CheckpointStore,
    options: Options,
}

/// Recorded with each checkpoint, checked on recovery: state is per subtask, so it
/// is only valid for the same chain at the same parallelism.
#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
struct Shape {
    parallelism: usize,
    operators: Vec<String>,
    source_topic: String,
}

impl Engine {
    pub fn new(job: Job, plugins: Vec<Plugin>, store: CheckpointStore, options: Options) -> Engine {
        assert_eq!(plugins.len(), job.operators.len(), "one plugin per operator");
        Engine { job, plugins, store, options }
    }

    /// Runs the job until a stop is requested (then returns Ok after a final commit)
    /// or it fails in a way a restart cannot cure.
    pub fn run(&self) -> Result<(), TaskFailure> {
        let mut suspects: HashSet<Origin> = HashSet::new();
        let mut restarts: Vec<Instant> = Vec::new();
        let mut started_once = false;
        loop {
            let failure = match self.attempt(&suspects, &mut started_once) {
                Ok(Outcome::Stopped) => return Ok(()),
                Err(failure) => failure,
            };
            if failure.is_fatal() || !started_once {
                return Err(failure);
            }
            if let TaskFailure::Operator { origins, .. } = &failure {
                suspects.extend(origins.iter().copied());
            }
            let policy = &self.job.restarts;
            let now = Instant::now();
            restarts.retain(|at| now.duration_since(*at) < Duration::from_millis(policy.window_ms));
            if restarts.len() >= policy.max as usize {
                tracing::error!("{} restarts within {} ms; giving up", restarts.len(), policy.window_ms);
                return Err(failure);
            }
            restarts.push(now);
            self.options.metrics.restarts().inc();
            let doublings = (restarts.len() - 1).min(16) as u32;
            let backoff = Duration::from_millis(
                policy.backoff_initial_ms.saturating_mul(1 << doublings).min(policy.backoff_max_ms),
            );
            tracing::warn!("attempt failed: {failure}; restarting from the last committed checkpoint in {backoff:?}");
            std::thread::sleep(backoff);
        }
    }

    fn attempt(&self, suspects: &HashSet<Origin>, started_once: &mut bool) -> Result<Outcome, TaskFailure> {
        let job = &self.job;
        let group = job.name.as_str();
        let offsets_consumer = source::consumer(&job.source.brokers, group, &job.source.kafka)
            .map_err(|e| TaskFailure::Kafka(format!("creating a consumer for {}: {e}", job.source.brokers)))?;
        let partitions = recovery::partitions(&offsets_consumer, &job.source.brokers, &job.source.topic, CONNECT_TIMEOUT)
            .map_err(TaskFailure::Recovery)?;
        let sink_config = SinkConfig {
            job: group,
            brokers: &job.sink.brokers,
            topic: &job.sink.topic,
            dead_letter_topic: job.sink.dead_letter_topic.as_deref(),
            delivery: match job.sink.delivery {
                job::Delivery::ExactlyOnce => Delivery::ExactlyOnce,
                job::Delivery::AtLeastOnce => Delivery::AtLeastOnce,
            },
            extra: &job.sink.kafka,
        };
        // Fence first: a zombie's open transaction is aborted before offsets are read.
        let sink = Sink::connect(&sink_config, offsets_consumer).map_err(TaskFailure::Sink)?;
        let resume_consumer = source::consumer(&job.source.brokers, group, &job.source.kafka)
            .map_err(|e| TaskFailure::Kafka(format!("creating a consumer for {}: {e}", job.source.brokers)))?;
        let resume = recovery::committed(&resume_consumer, group, &job.source.topic, &partitions, CONNECT_TIMEOUT)
            .map_err(TaskFailure::Recovery)?;
        let checkpoint = match resume.checkpoint {
            Some(n) => {
                let checkpoint = self.store.load(n).map_err(TaskFailure::Store)?;
                self.check_shape(&checkpoint)?;
                Some(checkpoint)
            }
            None => None,
        };
        // Anything sealed after the committed checkpoint (on a fresh start: anything at all)
        // never reached its Kafka commit; the attempt reuses those ids, so it must go.
        self.store.discard_after(resume.checkpoint.unwrap_or(0)).map_err(TaskFailure::Store)?;
        fault::point(Step::DuringRecovery, resume.checkpoint.unwrap_or(0));

        let starts = self.start_offsets(&resume_consumer, &partitions, &resume, checkpoint.as_ref())?;
        let instances = self.instances(checkpoint.as_ref())?;
        sink.begin().map_err(TaskFailure::Sink)?;
        *started_once = true;
        tracing::info!(
            job = %job.name,
            checkpoint = ?resume.checkpoint,
            partitions = partitions.len(),
            "recovered; running"
        );
        self.execute(&sink, starts, instances, suspects, resume.checkpoint.unwrap_or(0) + 1)
    }

    fn check_shape(&self, checkpoint: &Checkpoint) -> Result<(), TaskFailure> {
        let stored: Shape = serde_json::from_slice(&checkpoint.meta).map_err(|e| {
            TaskFailure::Incompatible(format!("checkpoint {} has an unreadable job description: {e}", checkpoint.n))
        })?;
        let current = self.shape();
        if stored != current {
            return Err(TaskFailure::Incompatible(format!(
                "checkpoint {} was taken by a different job shape ({stored:?}) than this job file's ({current:?}); \
                 keyed state cannot move between them: restore the old job file, or start over under a new job name",
                checkpoint.n
            )));
        }
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            parallelism: self.job.parallelism as usize,
            operators: self.job.operators.iter().map(|o| o.name.clone()).collect(),
            source_topic: self.job.source.topic.clone(),
        }
    }

    /// Each source task's partitions, at the committed offset or, for a partition that
    /// has none, at the job's start position resolved to a real offset.
    fn start_offsets(
        &self,
        consumer: &rdkafka::consumer::BaseConsumer,
        partitions: &[i32],
        resume: &recovery::Resume,
        checkpoint: Option<&Checkpoint>,
    ) -> Result<Vec<BTreeMap<i32, PartitionState>>, TaskFailure> {
        use rdkafka::consumer::Consumer;
        let mut max_timestamps = BTreeMap::new();
        if let Some(checkpoint) = checkpoint {
            for (task, bytes) in &checkpoint.tasks {
                if task.starts_with("source/") {
                    let states: Vec<PartitionState> = serde_json::from_slice(bytes).map_err(|e| {
                        TaskFailure::Store(corrupt_entry(&self.store, checkpoint.n, task, &e.to_string()))
                    })?;
                    for state in states {
                        max_timestamps.insert(state.partition, state.max_timestamp);
                    }
                }
            }
        }
        let parallelism = self.job.parallelism as usize;
        let mut tasks = vec![BTreeMap::new(); parallelism];
        for (index, &partition) in partitions.iter().enumerate() {
            let next_offset = match resume.offsets.get(&partition) {
                Some(&offset) => offset,
                None => {
                    let (low, high) = consumer
                        .fetch_watermarks(&self.job.source.topic, partition, CONNECT_TIMEOUT)
                        .map_err(|e| TaskFailure::Kafka(format!("reading the offsets of {}/{partition}: {e}", self.job.source.topic)))?;
                    match self.job.source.start {
                        job::Start::Earliest => low,
                        job::Start::Latest => high,
                    }
                }
            };
            let max_timestamp = max_timestamps.get(&partition).copied().unwrap_or(i64::MIN);
            tasks[index % parallelism].insert(partition, PartitionState { partition, next_offset, max_timestamp });
        }
        Ok(tasks)
    }

    /// A fresh instance per operator subtask, restored from the checkpoint if any.
    fn instances(&self, checkpoint: Option<&Checkpoint>) -> Result<Vec<Vec<(OperatorInstance, i64)>>, TaskFailure> {
        let mut stages = Vec::new();
        for (stage, (spec, plugin)) in self.job.operators.iter().zip(&self.plugins).enumerate() {
            let limits = operator_limits(spec);
            let config: Vec<(String, String)> = spec.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            let mut subtasks = Vec::new();
            for subtask in 0..self.job.parallelism as usize {
                let label = format!("{}[{subtask}]", spec.name);
                let mut instance = OperatorInstance::new(plugin, limits, config.clone(), label)
                    .map_err(TaskFailure::operator)?;
                instance.count_log_drops(self.options.metrics.plugin_log(&spec.name, subtask as u32));
                let mut watermark = i64::MIN;
                if let Some(checkpoint) = checkpoint {
                    let task = operator_task::task_name(stage, subtask);
                    let bytes = checkpoint.tasks.get(&task).ok_or_else(|| {
                        TaskFailure::Store(corrupt_entry(&self.store, checkpoint.n, &task, "no entry for this subtask"))
                    })?;
                    let (restored, guest) = operator_task::decode_state(bytes).ok_or_else(|| {
                        TaskFailure::Store(corrupt_entry(&self.store, checkpoint.n, &task, "entry shorter than its header"))
                    })?;
                    instance.restore(guest).map_err(TaskFailure::operator)?;
                    watermark = restored;
                }
                subtasks.push((instance, watermark));
            }
            stages.push(subtasks);
        }
        Ok(stages)
    }

    /// Runs the task graph of one attempt until the coordinator returns.
    fn execute(
        &self,
        sink: &Sink,
        starts: Vec<BTreeMap<i32, PartitionState>>,
        instances: Vec<Vec<(OperatorInstance, i64)>>,
        suspects: &HashSet<Origin>,
        next: u64,
    ) -> Result<Outcome, TaskFailure> {
        let job = &self.job;
        let parallelism = job.parallelism as usize;
        let (events_tx, events_rx) = bounded::<Event>(4 * parallelism * (job.operators.len() + 2) + 16);
        let (committed_tx, committed_rx) = bounded::<u64>(1);
        let suspects = Arc::new(suspects.clone());

        // inputs[stage][subtask] are the receivers of that subtask; stage == operators.len() is the sink.
        let stages = job.operators.len();
        let mut senders: Vec<Vec<Vec<Sender<Message>>>> = Vec::new(); // [producer stage][producer subtask] -> outputs
        let mut receivers: Vec<Vec<Vec<Receiver<Message>>>> = Vec::new(); // [consumer stage][consumer subtask] -> inputs
        for consumer_stage in 0..=stages {
            let key_by = consumer_stage < stages && job.operators[consumer_stage].key_by;
            let (outputs, inputs) = wire(parallelism, key_by, consumer_stage == stages);
            senders.push(outputs);
            receivers.push(inputs);
        }

        let mut control = Vec::new();
        let outcome = std::thread::scope(|scope| {
            let mut handles = Vec::new();
            let mut senders = senders.into_iter();
            let mut receivers = receivers.into_iter();

            let source_outputs = senders.next().expect("the first edge");
            for (index, (outputs, partitions)) in source_outputs.into_iter().zip(starts).enumerate() {
                let (control_tx, control_rx) = bounded(4);
                control.push(control_tx);
                let consumer = source::consumer(&job.source.brokers, &job.name, &job.source.kafka)
                    .map_err(|e| TaskFailure::Kafka(format!("creating a consumer for {}: {e}", job.source.brokers)))?;
                let task = SourceTask {
                    index,
                    topic: job.source.topic.clone(),
                    fetcher: source::fetch::Fetcher::new(consumer, &job.source.topic, partitions.keys().copied())
                        .map_err(|e| TaskFailure::Kafka(format!("source {index} of topic {}: {e}", job.source.topic)))?,
                    partitions,
                    max_out_of_orderness_ms: job.source.max_out_of_orderness_ms as i64,
                    outputs,
                    key_by: job.operators[0].key_by,
                    control: control_rx,
                    events: events_tx.clone(),
                    metrics: self.options.metrics.clone(),
                    idle_timeout: job.source.idle_timeout(),
                };
                let what = format!("source task {index} (topic {})", job.source.topic);
                handles.push(spawn_task(scope, format!("source-{index}"), what, events_tx.clone(), move || task.run()));
            }

            for (stage, subtasks) in instances.into_iter().enumerate() {
                let inputs = receivers.next().expect("an edge into every operator");
                let outputs = senders.next().expect("an edge out of every operator");
                let key_by_next = stage + 1 < stages && job.operators[stage + 1].key_by;
                for (subtask, (((instance, watermark), inputs), outputs)) in
                    subtasks.into_iter().zip(inputs).zip(outputs).enumerate()
                {
                    let task = OperatorTask {
                        name: job.operators[stage].name.clone(),
                        stage,
                        subtask,
                        instance,
                        watermark,
                        inputs,
                        outputs,
                        key_by_next,
                        events: events_tx.clone(),
                        suspects: Arc::clone(&suspects),
                        dead_letters: job.sink.dead_letter_topic.is_some(),
                        source_topic: job.source.topic.clone(),
                        metrics: self.options.metrics.operator(&job.operators[stage].name, subtask as u32),
                        dead_letter_count: self.options.metrics.dead_letter_records(),
                    };
                    let name = format!("{}-{subtask}", job.operators[stage].name);
                    let what = format!(
                        "operator `{}` subtask {subtask} (plugin {})",
                        job.operators[stage].name,
                        self.plugins[stage].path().display()
                    );
                    handles.push(spawn_task(scope, name, what, events_tx.clone(), move || task.run()));
                }
            }

            let sink_inputs = receivers.next().expect("the edge into the sink").into_iter().next().expect("one sink");
            let sink_task = SinkTask {
                sink,
                source_topic: job.source.topic.clone(),
                inputs: sink_inputs,
                events: events_tx.clone(),
                committed: committed_rx,
            };
            let what = format!("the sink task (topic {})", job.sink.topic);
            handles.push(spawn_task(scope, "sink".to_string(), what, events_tx.clone(), move || sink_task.run()));
            drop(events_tx);

            let mut coordinator = Coordinator {
                store: &self.store,
                sink,
                source_topic: &job.source.topic,
                sources: control.clone(),
                events: events_rx,
                committed: committed_tx,
                expected_states: parallelism * (stages + 1),
                interval: job.checkpoint_interval(),
                timeout: job.checkpoint_interval().max(Duration::from_secs(60)),
                meta: serde_json::to_vec(&self.shape()).expect("shape serializes"),
                next,
                stop: Arc::clone(&self.options.stop),
                metrics: &self.options.metrics,
                watchdog: crate::checkpoint::watchdog::Watchdog::start(),
            };
            let outcome = coordinator.run();
            // Tear down: sources stop, channel closures end everything downstream.
            for source in &control {
                let _ = source.try_send(Control::Stop);
            }
            drop(control);
            drop(coordinator);
            for handle in handles {
                let _ = handle.join();
            }
            outcome
        });
        if matches!(outcome, Ok(Outcome::Stopped)) {
            let what = "aborting the open transaction on shutdown".to_string();
            crate::checkpoint::watchdog::Watchdog::start().guard(what, crate::sink::COMMIT_BOUND, || sink.abort());
        }
        outcome
    }
}

/// What each instance of operator `spec` may use, from its job-file keys.
fn operator_limits(spec: &job::Operator) -> Limits {
    Limits {
        memory_bytes: spec.memory_limit_bytes(),
        call_timeout: spec.call_timeout(),
        max_output_records: spec.max_output_records as usize,
        max_output_bytes: spec.max_output_bytes(),
        log: LogLimits {
            lines_per_sec: spec.log_lines_per_sec,
            bytes_per_sec: u64::from(spec.log_kib_per_sec) << 10,
        },
    }
}

fn corrupt_entry(store: &CheckpointStore, n: u64, task: &str, detail: &str) -> StoreError {
    StoreError::Corrupt {
        dir: store.dir().to_path_buf(),
        job: store.job().to_string(),
        n,
        task: Some(task.to_string()),
        detail: detail.to_string(),
    }
}

/// Channels for one edge: `outputs[producer]` and `inputs[consumer]`. A key-by edge
/// (and the edge into the single sink) connects every producer to every consumer; a
/// forward edge connects producer i to consumer i.
fn wire(parallelism: usize, key_by: bool, into_sink: bool) -> (Vec<Vec<Sender<Message>>>, Vec<Vec<Receiver<Message>>>) {
    let consumers = if into_sink { 1 } else { parallelism };
    let mut outputs: Vec<Vec<Sender<Message>>> = vec![Vec::new(); parallelism];
    let mut inputs: Vec<Vec<Receiver<Message>>> = vec![Vec::new(); consumers];
    for (producer, producer_outputs) in outputs.iter_mut().enumerate() {
        for (consumer, consumer_inputs) in inputs.iter_mut().enumerate() {
            let connected = into_sink || key_by || producer == consumer;
            if connected {
                let (tx, rx) = bounded(CHANNEL_BATCHES);
                producer_outputs.push(tx);
                consumer_inputs.push(rx);
            }
        }
    }
    (outputs, inputs)
}

/// Runs a task on its own named thread. Whatever ends it, an error or a panic, reaches
/// the coordinator as a failure naming the task (`what`), so the attempt ends at once.
fn spawn_task<'scope, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: String,
    what: String,
    events: Sender<Event>,
    body: F,
) -> std::thread::ScopedJoinHandle<'scope, ()>
where
    F: FnOnce() -> Result<(), TaskFailure> + Send + 'scope,
{
    std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, move || {
            // Unwind safety: a panicked task's state is dropped with the attempt, never reused.
            let failure = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
                Ok(Ok(())) | Ok(Err(TaskFailure::Stopped)) => return,
                Ok(Err(failure)) => failure,
                Err(payload) => TaskFailure::Panicked { task: what, message: panic_message(payload.as_ref()) },
            };
            let _ = events.send(Event::Failed(failure));
        })
        .expect("spawning a task thread")
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}
