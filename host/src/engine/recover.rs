//! An attempt's first half (DESIGN.md §2, recovery order): fence earlier instances,
//! read the committed checkpoint from Kafka, load and decode it from the store, discard
//! what was sealed after it, and rebuild every task's starting point from it.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::checkpoint::layout::{self, FormatError, PartitionState, Shape, Snapshot};
use crate::checkpoint::recovery::{self, Resume};
use crate::checkpoint::store::{CheckpointStore, StoreError};
use crate::dataflow::TaskFailure;
use crate::job::{self, Job};
use crate::metrics::Metrics;
use crate::operator::{Limits, LogLimits, OperatorInstance, Plugin};
use crate::sink::{Delivery, Sink, SinkConfig};
use crate::source;

use super::fault::{self, Step};

/// How long Kafka may take to answer at start-up before the job gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an attempt starts: every task's state as of the last committed checkpoint.
pub(super) struct Recovered {
    /// Fenced, with a transaction open.
    pub(super) sink: Sink,
    /// `sources[i]`: the partitions of source task i, at the offsets to read next.
    pub(super) sources: Vec<BTreeMap<i32, PartitionState>>,
    /// `operators[stage][subtask]`: a restored instance and the watermark it had reached.
    pub(super) operators: Vec<Vec<(OperatorInstance, i64)>>,
    /// The id of the attempt's first checkpoint.
    pub(super) next: u64,
}

pub(super) fn recover(job: &Job, plugins: &[Plugin], store: &CheckpointStore, metrics: &Metrics) -> Result<Recovered, TaskFailure> {
    let group = job.name.as_str();
    let offsets_consumer = consumer(job)?;
    let partitions = recovery::partitions(&offsets_consumer, &job.source.brokers, &job.source.topic, CONNECT_TIMEOUT)
        .map_err(TaskFailure::Recovery)?;
    // Fence first: a zombie's open transaction is aborted before offsets are read.
    let sink = Sink::connect(&sink_config(job), offsets_consumer)?;
    let resume_consumer = consumer(job)?;
    let resume = recovery::committed(&resume_consumer, group, &job.source.topic, &partitions, CONNECT_TIMEOUT)
        .map_err(TaskFailure::Recovery)?;
    let snapshot = match resume.checkpoint {
        Some(n) => Some(load(job, store, n)?),
        None => None,
    };
    // Anything sealed after the committed checkpoint (on a fresh start: anything at all)
    // never reached its Kafka commit; the attempt reuses those ids, so it must go.
    let committed = resume.checkpoint.unwrap_or(0);
    store.discard_after(committed).map_err(TaskFailure::Store)?;
    fault::point(Step::DuringRecovery, committed);

    let sources = start_offsets(job, &resume_consumer, &partitions, &resume, snapshot.as_ref())?;
    let operators = instances(job, plugins, metrics, store, snapshot.as_ref())?;
    sink.begin()?;
    tracing::info!(job = %job.name, checkpoint = ?resume.checkpoint, partitions = partitions.len(), "recovered; running");
    Ok(Recovered { sink, sources, operators, next: committed + 1 })
}

/// What a checkpoint of this job records about it.
pub(super) fn shape(job: &Job) -> Shape {
    Shape {
        parallelism: job.parallelism,
        operators: job.operators.iter().map(|o| o.name.clone()).collect(),
        source_topic: job.source.topic.clone(),
    }
}

/// A consumer of the job's group on its source brokers.
pub(super) fn consumer(job: &Job) -> Result<BaseConsumer, TaskFailure> {
    source::consumer(&job.source.brokers, &job.name, &job.source.kafka)
        .map_err(|e| TaskFailure::Kafka(format!("creating a consumer for {}: {e}", job.source.brokers)))
}

fn sink_config(job: &Job) -> SinkConfig<'_> {
    SinkConfig {
        job: &job.name,
        brokers: &job.sink.brokers,
        topic: &job.sink.topic,
        dead_letter_topic: job.sink.dead_letter_topic.as_deref(),
        delivery: match job.sink.delivery {
            job::Delivery::ExactlyOnce => Delivery::ExactlyOnce,
            job::Delivery::AtLeastOnce => Delivery::AtLeastOnce,
        },
        extra: &job.sink.kafka,
    }
}

/// Checkpoint `n`, decoded and checked against this job's shape.
fn load(job: &Job, store: &CheckpointStore, n: u64) -> Result<Snapshot, TaskFailure> {
    let checkpoint = store.load(n).map_err(TaskFailure::Store)?;
    let snapshot = layout::decode(&checkpoint).map_err(|error| match error {
        FormatError::Newer { .. } => TaskFailure::Incompatible(format!("checkpoint {n} cannot be read: {error}")),
        FormatError::Corrupt { task, detail } => TaskFailure::Store(corrupt(store, n, task, detail)),
    })?;
    let current = shape(job);
    if snapshot.shape != current {
        return Err(TaskFailure::Incompatible(format!(
            "checkpoint {n} was taken by a different job shape ({:?}) than this job file's ({current:?}); \
             keyed state cannot move between them: restore the old job file, or start over under a new job name",
            snapshot.shape
        )));
    }
    Ok(snapshot)
}

/// Each source task's partitions, at the committed offset or, for a partition that
/// has none, at the job's start position resolved to a real offset.
fn start_offsets(
    job: &Job,
    consumer: &BaseConsumer,
    partitions: &[i32],
    resume: &Resume,
    snapshot: Option<&Snapshot>,
) -> Result<Vec<BTreeMap<i32, PartitionState>>, TaskFailure> {
    let parallelism = job.parallelism as usize;
    let mut tasks = vec![BTreeMap::new(); parallelism];
    for (index, &partition) in partitions.iter().enumerate() {
        let next_offset = match resume.offsets.get(&partition) {
            Some(&offset) => offset,
            None => {
                let (low, high) = consumer.fetch_watermarks(&job.source.topic, partition, CONNECT_TIMEOUT).map_err(|e| {
                    TaskFailure::Kafka(format!("reading the offsets of {}/{partition}: {e}", job.source.topic))
                })?;
                match job.source.start {
                    job::Start::Earliest => low,
                    job::Start::Latest => high,
                }
            }
        };
        let max_timestamp = snapshot
            .and_then(|s| s.partitions.get(&partition))
            .map_or(i64::MIN, |state| state.max_timestamp);
        tasks[index % parallelism].insert(partition, PartitionState { partition, next_offset, max_timestamp });
    }
    Ok(tasks)
}

/// A fresh instance per operator subtask, restored from the checkpoint if any.
fn instances(
    job: &Job,
    plugins: &[Plugin],
    metrics: &Metrics,
    store: &CheckpointStore,
    snapshot: Option<&Snapshot>,
) -> Result<Vec<Vec<(OperatorInstance, i64)>>, TaskFailure> {
    let mut stages = Vec::with_capacity(job.operators.len());
    for (stage, (spec, plugin)) in (0u32..).zip(job.operators.iter().zip(plugins)) {
        let config: Vec<(String, String)> = spec.config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut subtasks = Vec::with_capacity(job.parallelism as usize);
        for subtask in 0..job.parallelism {
            let label = format!("{}[{subtask}]", spec.name);
            let mut instance =
                OperatorInstance::new(plugin, operator_limits(spec), config.clone(), label).map_err(TaskFailure::operator)?;
            instance.count_log_drops(metrics.plugin_log(&spec.name, subtask));
            let mut watermark = i64::MIN;
            if let Some(snapshot) = snapshot {
                let state = snapshot.operators.get(&(stage, subtask)).ok_or_else(|| {
                    let task = layout::TaskId::Operator { stage, subtask }.to_string();
                    TaskFailure::Store(corrupt(store, snapshot.n, Some(task), "no entry for this subtask".into()))
                })?;
                instance.restore(&state.guest).map_err(TaskFailure::operator)?;
                watermark = state.watermark;
            }
            subtasks.push((instance, watermark));
        }
        stages.push(subtasks);
    }
    Ok(stages)
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

fn corrupt(store: &CheckpointStore, n: u64, task: Option<String>, detail: String) -> StoreError {
    StoreError::Corrupt { dir: store.dir().to_path_buf(), job: store.job().to_string(), n, task, detail }
}
