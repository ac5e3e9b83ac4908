//! Recovery's first half: which checkpoint the job last committed. Kafka's committed
//! offsets for the job's group are the single source of truth; their metadata names
//! the checkpoint (`weir:ckpt=N`) whose snapshots the store must hold.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use super::layout::{self, ShardMetadata};


/// Where the job resumes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Resume {
    /// The last committed checkpoint; `None` on a fresh start.
    pub(crate) checkpoint: Option<u64>,
    /// The next offset to read of each partition that has one committed.
    pub(crate) offsets: BTreeMap<i32, i64>,
    /// The greatest event time read of each partition that recorded it with its offset.
    pub(crate) max_timestamps: BTreeMap<i32, i64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("cannot reach Kafka at {brokers} within {}s to read topic {topic}: {detail}; check [source].brokers and that the brokers are up", timeout.as_secs())]
    Unreachable { brokers: String, topic: String, timeout: Duration, detail: String },
    #[error("source topic {topic} does not exist on {brokers}; create it or fix [source].topic")]
    NoTopic { topic: String, brokers: String },
    #[error("reading the committed offsets of consumer group `{group}`: {detail}")]
    Offsets { group: String, detail: String },
    #[error(
        "consumer group `{group}` has offsets committed on {topic}/{partition} that weir did not write \
         (metadata `{metadata}`); another application uses this group: give the job another name"
    )]
    Foreign { group: String, topic: String, partition: i32, metadata: String },
    #[error(
        "consumer group `{group}` names different checkpoints on different partitions ({found:?}); \
         the offsets were changed outside weir"
    )]
    Mixed { group: String, found: Vec<u64> },
    #[error(
        "consumer group `{group}` has offsets on {topic}/{partition} that processes of a scaled-out job \
         committed (metadata `{metadata}`), but this job file does not set scale_out = true; set it (and \
         start one or more processes), so the job's processes share its partitions"
    )]
    ScaledOut { group: String, topic: String, partition: i32, metadata: String },
}

/// Where a process of a scaled-out job resumes its partitions.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ShardResume {
    /// Per owned partition with committed offsets: the next offset to read and what was
    /// committed with it.
    pub(crate) offsets: BTreeMap<i32, (i64, ShardMetadata)>,
    /// The greatest checkpoint number among them.
    pub(crate) checkpoint: Option<u64>,
}

/// How long a topic that is not in the brokers' metadata is asked for again: a broker
/// answers from its own copy of the cluster's metadata, which may not hold a topic created
/// a moment ago (by the script that starts the job) yet.
const NEW_TOPIC_GRACE: Duration = Duration::from_secs(3);
const ASK_AGAIN: Duration = Duration::from_millis(100);

/// `ask`'s answer, asked again for up to `NEW_TOPIC_GRACE` while `unlisted` says it lacks
/// a topic the brokers may not know of yet.
pub(crate) fn until_listed<T>(mut ask: impl FnMut() -> T, unlisted: impl Fn(&T) -> bool) -> T {
    let deadline = Instant::now() + NEW_TOPIC_GRACE;
    loop {
        let answer = ask();
        if !unlisted(&answer) || Instant::now() >= deadline {
            return answer;
        }
        std::thread::sleep(ASK_AGAIN);
    }
}

/// The partitions of `topic`, in order.
pub(crate) fn partitions(consumer: &BaseConsumer, brokers: &str, topic: &str, timeout: Duration) -> Result<Vec<i32>, RecoveryError> {
    until_listed(
        || listed_partitions(consumer, brokers, topic, timeout),
        |answer| matches!(answer, Err(RecoveryError::NoTopic { .. })),
    )
}

fn listed_partitions(consumer: &BaseConsumer, brokers: &str, topic: &str, timeout: Duration) -> Result<Vec<i32>, RecoveryError> {
    let listed = partitions_now(consumer, topic, timeout).map_err(|e| RecoveryError::Unreachable {
        brokers: brokers.to_string(),
        topic: topic.to_string(),
        timeout,
        detail: e.to_string(),
    })?;
    listed.ok_or_else(|| RecoveryError::NoTopic { topic: topic.to_string(), brokers: brokers.to_string() })
}

/// The partitions of `topic` in order, as the broker lists them in one answer; `None`
/// if it lists no such topic.
pub(crate) fn partitions_now(consumer: &BaseConsumer, topic: &str, timeout: Duration) -> Result<Option<Vec<i32>>, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    Ok(found.filter(|t| t.error().is_none() && !t.partitions().is_empty()).map(|t| {
        let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        ids.sort_unstable();
        ids
    }))
}

/// Reads the job's committed offsets (stable: a pending transaction's offsets are
/// waited for, never read half-done) and the checkpoint they name.
pub(crate) fn committed(consumer: &BaseConsumer, group: &str, topic: &str, partitions: &[i32], timeout: Duration) -> Result<Resume, RecoveryError> {
    let mut resume = Resume::default();
    let mut checkpoints = Vec::new();
    for (partition, offset, metadata) in committed_offsets(consumer, group, topic, partitions, timeout)? {
        let Some((n, max_timestamp)) = layout::parse_offset_metadata(&metadata) else {
            if layout::parse_shard_offset_metadata(&metadata).is_some_and(|meta| meta.max_timestamp.is_some()) {
                return Err(RecoveryError::ScaledOut {
                    group: group.to_string(),
                    topic: topic.to_string(),
                    partition,
                    metadata,
                });
            }
            return Err(RecoveryError::Foreign {
                group: group.to_string(),
                topic: topic.to_string(),
                partition,
                metadata,
            });
        };
        checkpoints.push(n);
        resume.offsets.insert(partition, offset);
        if let Some(time) = max_timestamp {
            resume.max_timestamps.insert(partition, time);
        }
    }
    checkpoints.sort_unstable();
    checkpoints.dedup();
    match checkpoints.as_slice() {
        [] => {}
        [n] => resume.checkpoint = Some(*n),
        _ => return Err(RecoveryError::Mixed { group: group.to_string(), found: checkpoints }),
    }
    Ok(resume)
}

/// The committed offsets of the partitions a process of a scaled-out job owns (stable,
/// as `committed` reads them). Each partition names the checkpoint of the process that
/// committed it last, so they may differ; a single process's (before the job was
/// scaled out) are accepted too.
pub(crate) fn committed_shard(
    consumer: &BaseConsumer,
    group: &str,
    topic: &str,
    owned: &[i32],
    timeout: Duration,
) -> Result<ShardResume, RecoveryError> {
    let mut resume = ShardResume::default();
    for (partition, offset, metadata) in committed_offsets(consumer, group, topic, owned, timeout)? {
        let Some(meta) = layout::parse_shard_offset_metadata(&metadata) else {
            return Err(RecoveryError::Foreign {
                group: group.to_string(),
                topic: topic.to_string(),
                partition,
                metadata,
            });
        };
        resume.checkpoint = resume.checkpoint.max(Some(meta.n));
        resume.offsets.insert(partition, (offset, meta));
    }
    Ok(resume)
}

/// Runs `call` again while the group coordinator is still loading or moving (a broker
/// that has just started answers so for a while; Kafka's protocol has such errors
/// retried), for up to `timeout`.
pub(crate) fn while_coordinator_loads<T>(
    timeout: Duration,
    mut call: impl FnMut() -> Result<T, rdkafka::error::KafkaError>,
) -> Result<T, rdkafka::error::KafkaError> {
    use rdkafka::types::RDKafkaErrorCode::{CoordinatorLoadInProgress, CoordinatorNotAvailable, NotCoordinator};
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match call() {
            Err(error)
                if matches!(error.rdkafka_error_code(), Some(CoordinatorLoadInProgress | CoordinatorNotAvailable | NotCoordinator))
                    && std::time::Instant::now() < deadline =>
            {
                tracing::debug!("the group coordinator is not ready ({error}); asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            answer => return answer,
        }
    }
}

/// `(partition, offset, metadata)` of each of `partitions` that has a committed offset,
/// read stable.
fn committed_offsets(
    consumer: &BaseConsumer,
    group: &str,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<Vec<(i32, i64, String)>, RecoveryError> {
    let mut query = TopicPartitionList::new();
    for &partition in partitions {
        query.add_partition(topic, partition);
    }
    let answer = while_coordinator_loads(timeout, || consumer.committed_offsets(query.clone(), timeout))
        .map_err(|e| RecoveryError::Offsets { group: group.to_string(), detail: e.to_string() })?;
    let committed = answer.elements().into_iter().filter_map(|element| match element.offset() {
        Offset::Offset(offset) => Some((element.partition(), offset, element.metadata().to_string())),
        _ => None,
    });
    Ok(committed.collect())
}
