//! The Kafka sink: ONE producer per process and, exactly-once, ONE transaction per
//! checkpoint epoch shared by every sink input. The sink task hands records to the
//! producer; the coordinator commits them together with the input offsets.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerGroupMetadata};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message as _, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::batch::{Batch, RecordRef};
use crate::checkpoint::layout::{self, PartitionState, ShardMetadata};
use crate::checkpoint::recovery::until_listed;
use crate::dataflow::{DeadLetter, Event, InputTopics, Message, TaskFailure};

pub mod config;

/// How long one transactional call may take before the attempt is failed.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `Sink::commit` takes when librdkafka keeps to its timeouts: weir's
/// flush, the offsets, rdkafka's own flush (nothing left by then) and the commit, each
/// within `TXN_TIMEOUT`; the next begin is local.
pub(crate) const COMMIT_BOUND: Duration = Duration::from_secs(4 * TXN_TIMEOUT.as_secs());
/// How long a new producer waits for its first broker connection before it goes on.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the brokers may take to list their topics at start.
const TOPICS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a full producer queue may refuse records before the attempt is failed.
const QUEUE_FULL_LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    ExactlyOnce,
    AtLeastOnce,
}

/// Counts deliveries that failed, so an at-least-once commit never covers a lost record.
#[derive(Default)]
pub(crate) struct SinkContext {
    failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
    /// The first record the broker refused for what it is (`refusal`): a restart would
    /// send it again.
    refused: Mutex<Option<Refused>>,
}

/// A record the broker refused for what it is, as a delivery reported it.
#[derive(Clone, Debug)]
struct Refused {
    topic: String,
    bytes: usize,
    code: RDKafkaErrorCode,
}

/// Why the broker refuses a record every time it is sent, if it does: what the error
/// says of the record, and what to change.
fn refusal(code: RDKafkaErrorCode) -> Option<&'static str> {
    match code {
        RDKafkaErrorCode::InvalidRecord => Some(
            "the topic does not take it (a compacted topic takes only records with a key): have the \
             operator give every record a key, or write to a topic that takes it",
        ),
        RDKafkaErrorCode::InvalidTimestamp => Some(
            "its timestamp is further from the broker's clock than the topic takes \
             (message.timestamp.before.max.ms / message.timestamp.after.max.ms): have the operator emit \
             event times near now, or raise those settings of the topic",
        ),
        RDKafkaErrorCode::TopicAuthorizationFailed => Some(
            "the job's principal may not write the topic: grant it Write on the topic (and the \
             transactional id), or write to another",
        ),
        _ => None,
    }
}

/// What librdkafka says while `init_transactions` waits for the broker to finish
/// aborting the transaction an earlier holder of the transactional.id left open.
const CONCURRENT_TRANSACTIONS: &str = "concurrent operation on the same transaction";

impl ClientContext for SinkContext {
    /// librdkafka logs at WARN each retry of `init_transactions` while the broker
    /// still aborts what the fenced instance left open: the expected end of every
    /// restart's fencing, said so at INFO; everything else as rdkafka logs it.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if message.contains(CONCURRENT_TRANSACTIONS) {
            tracing::info!(
                target: "librdkafka",
                "the broker is still aborting the transaction an earlier instance of this job left open \
                 (fencing it is part of every start); librdkafka retries until it is done: {facility} {message}"
            );
            return;
        }
        DefaultClientContext.log(level, facility, message);
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((error, message)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first_failure.lock().expect("delivery failure lock");
            first.get_or_insert_with(|| error.to_string());
            if let Some(code) = error.rdkafka_error_code()
                && (code == RDKafkaErrorCode::MessageSizeTooLarge || refusal(code).is_some())
            {
                let mut refused = self.refused.lock().expect("delivery failure lock");
                refused.get_or_insert_with(|| Refused { topic: message.topic().to_owned(), bytes: message_bytes(message), code });
            }
        }
    }
}

pub(crate) struct SinkConfig<'a> {
    pub(crate) job: &'a str,
    /// The producer's: the job's name, or a scaled-out process's (`shard_transactional_id`).
    pub(crate) transactional_id: &'a str,
    pub(crate) brokers: &'a str,
    /// Every sink's topic.
    pub(crate) topics: Vec<&'a str>,
    pub(crate) dead_letter_topic: Option<&'a str>,
    pub(crate) delivery: Delivery,
    pub(crate) extra: &'a BTreeMap<String, String>,
}

pub(crate) struct Sink {
    job: String,
    producer: ThreadedProducer<SinkContext>,
    delivery: Delivery,
    /// The sinks' topics, for messages.
    topics: String,
    dead_letter_topic: Option<String>,
    /// Dead letters sent since the last commit: counted once committed, since an
    /// attempt that fails sends them again.
    dead_letters: AtomicU64,
    group: ConsumerGroupMetadata,
    /// Commits offsets in at-least-once mode; names the group in exactly-once mode.
    offsets: BaseConsumer,
    /// A scaled-out process's membership of the job's group, and what it commits with
    /// its offsets.
    shard: Option<ShardSink>,
    /// The member id under which a scaled-out process owns its partitions (read as the
    /// sink connects): a commit under any other is refused here, because the broker
    /// would take one from a rejoined member, or from no member at all, for partitions
    /// the group has given to others.
    member_id: Option<String>,
    transactional_id: String,
    /// When the open transaction began, and how long the broker lets one stay open.
    began: Mutex<Instant>,
    transaction_timeout: Duration,
}

/// A scaled-out process's membership of the job's group as it stands: its group
/// metadata and member id, `None` while it is no member (its member id was reset).
pub(crate) type Member = std::sync::Arc<dyn Fn() -> Option<(ConsumerGroupMetadata, String)> + Send + Sync>;

/// What the sink of a scaled-out process commits by.
pub(crate) struct ShardSink {
    /// Its group metadata, read at each commit: a process that lost its partitions
    /// carries a stale generation, and its commit is refused.
    pub(crate) member: Member,
    /// The input's partition count, recorded with every offset.
    pub(crate) partitions: u32,
    /// `layout::shape_hash` of the job, recorded with every offset.
    pub(crate) shape: u64,
    /// The lowest partition the process owns (its producer's name), recorded with every
    /// offset: the next owner fences it if it left a transaction open.
    pub(crate) lowest: i32,
    /// The job's key groups, recorded with every offset once the process knows them
    /// (`Sink::record_key_groups`, before its first transaction).
    pub(crate) key_groups: Option<u32>,
}

/// The transactional.id of the process of a scaled-out job whose lowest input partition
/// is `partition`: the next owner of that partition fences it (`fence`). `#` is not
/// allowed in job names, so no single-process job shares it.
pub(crate) fn shard_transactional_id(job: &str, partition: i32) -> String {
    format!("{job}#{partition}")
}

/// The membership as it stands, if the process is a member.
fn current_member(shard: &ShardSink) -> Result<(ConsumerGroupMetadata, String), SinkError> {
    (shard.member)().ok_or(SinkError::NotMember)
}

/// Fences the producer with `transactional_id` (its open transaction is aborted), so
/// that records and offsets a dead or paused process left pending neither commit nor
/// hold back readers until the transaction times out.
pub(crate) fn fence(config: &SinkConfig<'_>, transactional_id: &str) -> Result<(), SinkError> {
    start_producer(config, transactional_id, Some("fencing an earlier owner's transactions"), false).map(drop)
}

/// A producer of `config`'s brokers named `transactional_id`; with `check_topics`, one
/// refused when the sink or dead-letter topic is missing; with `init` (what the call
/// is, for its error), its transactions initialised, which fences the earlier holder of
/// that id and aborts the transaction it left open.
fn start_producer(
    config: &SinkConfig<'_>,
    transactional_id: &str,
    init: Option<&'static str>,
    check_topics: bool,
) -> Result<ThreadedProducer<SinkContext>, SinkError> {
    let client = self::config::client_config(transactional_id, config.brokers, init.is_some(), config.extra);
    let kafka = |doing, source| SinkError::Kafka { topic: config.topics.join(", "), doing, source };
    let producer: ThreadedProducer<SinkContext> =
        client.create_with_context(SinkContext::default()).map_err(|e| kafka("creating the producer", e))?;
    if check_topics {
        // The brokers' answer is the warm-up too: a connection is up from then on.
        until_listed(
            || {
                let metadata = producer.client().fetch_metadata(None, TOPICS_TIMEOUT).map_err(|e| kafka("listing the brokers' topics", e))?;
                check_topics_exist(&metadata, config)
            },
            |checked| matches!(checked, Err(SinkError::MissingTopic { .. })),
        )?;
    } else if init.is_some() {
        warm_up(producer.client());
    }
    if let Some(doing) = init {
        producer.init_transactions(TXN_TIMEOUT).map_err(|e| kafka(doing, e))?;
    }
    Ok(producer)
}

/// Waits (briefly) until the client has a broker connection up: librdkafka looks for the
/// transaction coordinator only through a connected broker and, finding none, looks again
/// 500 ms later, which every `init_transactions` of a new producer otherwise waited.
/// A broker that does not answer is left for `init_transactions` to report.
/// Asks for every topic's metadata, not the sink topic's: a producer's request for one
/// topic lets the broker create it (`auto.create.topics.enable`), with one partition.
fn warm_up<C: ClientContext>(client: &rdkafka::client::Client<C>) {
    let _ = client.fetch_metadata(None, WARM_UP_TIMEOUT);
}

/// The sink topic and the dead-letter topic must exist before the first record: a
/// produce to a missing topic has the broker create it silently with its default
/// partition count, which scatters keyed output nobody asked for.
fn check_topics_exist(metadata: &rdkafka::metadata::Metadata, config: &SinkConfig<'_>) -> Result<(), SinkError> {
    let exists = |name: &str| metadata.topics().iter().any(|topic| topic.name() == name && topic.error().is_none());
    let sinks = config.topics.iter().map(|&topic| ("sink topic", Some(topic)));
    let wanted = sinks.chain([("dead_letter_topic", config.dead_letter_topic)]);
    for (key, topic) in wanted {
        if let Some(topic) = topic.filter(|topic| !exists(topic)) {
            return Err(SinkError::MissingTopic { key, topic: topic.to_string(), brokers: config.brokers.to_string() });
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SinkError {
    #[error(
        "another weir instance with transactional.id `{transactional_id}` took over and fenced this one{}: {source}",
        aborted_note(*.open_past_timeout)
    )]
    Fenced { transactional_id: String, source: KafkaError, open_past_timeout: Option<Duration> },
    #[error("this process's membership of the job's consumer group is stale (the group moved its partitions): {source}")]
    StaleMember { source: KafkaError },
    #[error("this process is not a member of the job's consumer group any more: its partitions are others'")]
    NotMember,
    #[error(
        "{key} `{topic}` does not exist on {brokers}; weir does not let the broker create it with its default \
         partition count: create it with the partitions you want (kafka-topics.sh --create --topic {topic} \
         --partitions N), then start the job again"
    )]
    MissingTopic { key: &'static str, topic: String, brokers: String },
    #[error("Kafka sink for topic {topic}: {doing}: {source}")]
    Kafka { topic: String, doing: &'static str, source: KafkaError },
    #[error("{count} records could not be delivered to {topic} (first: {first})")]
    Undelivered { topic: String, count: u64, first: String },
    #[error("the producer queue for {topic} stayed full for {}s: the brokers accept records too slowly", QUEUE_FULL_LIMIT.as_secs())]
    QueueFull { topic: String },
    #[error(
        "a record for topic `{topic}` with {bytes} bytes of key, value and headers is larger than the producer \
         takes (message.max.bytes: 1000000 unless the job sets it), and would be again after a restart. Raise \
         message.max.bytes under [sink.kafka] ([producer.kafka] in the graph form) and the topic's \
         max.message.bytes on the broker, or, if an operator emitted it, have the operator emit smaller records"
    )]
    RecordTooLarge { topic: String, bytes: usize },
    #[error(
        "the broker refused records for topic `{topic}` as too large (one of them: {bytes} bytes of key, value \
         and headers), and would again after a restart: the topic's max.message.bytes is below the record \
         batches the producer sends (up to batch.size, 1000000 bytes unless the job sets it, or one record up \
         to message.max.bytes). Raise the topic's max.message.bytes (kafka-configs.sh --alter --entity-type \
         topics --entity-name {topic} --add-config max.message.bytes=N), or lower batch.size and \
         message.max.bytes to it under [sink.kafka] ([producer.kafka] in the graph form)"
    )]
    RefusedTooLarge { topic: String, bytes: usize },
    #[error(
        "the broker refused a record for topic `{topic}` ({bytes} bytes of key, value and headers) with \
         \"{code}\", and would again after a restart: {why}"
    )]
    Refused { topic: String, bytes: usize, code: RDKafkaErrorCode, why: &'static str },
    #[error(
        "the sink's brokers {brokers} are Kafka cluster {sink}, the sources' are cluster {sources}: an \
         exactly-once job commits its input offsets in the sink's transactions, which keep them on the \
         sink's cluster, where a restart would not find them. Write to the cluster the job reads, or run \
         the job at-least-once (delivery = \"at-least-once\")"
    )]
    OtherCluster { brokers: String, sink: String, sources: String },
}

/// Fencing is the one sink failure a restart cannot cure: restarting would fence the
/// instance that took over.
impl From<SinkError> for TaskFailure {
    fn from(error: SinkError) -> TaskFailure {
        match error {
            SinkError::Fenced { .. } => TaskFailure::Fenced(error.to_string()),
            SinkError::StaleMember { .. } | SinkError::NotMember => TaskFailure::LeftGroup(error.to_string()),
            SinkError::MissingTopic { .. }
            | SinkError::RecordTooLarge { .. }
            | SinkError::RefusedTooLarge { .. }
            | SinkError::Refused { .. }
            | SinkError::OtherCluster { .. } => {
                TaskFailure::Incompatible(error.to_string())
            }
            other => TaskFailure::Sink(other.to_string()),
        }
    }
}

fn is_fencing(error: &KafkaError) -> bool {
    error_code(error).is_some_and(is_fencing_code)
}

fn error_code(error: &KafkaError) -> Option<RDKafkaErrorCode> {
    match error {
        KafkaError::Transaction(e) => Some(e.code()),
        other => other.rdkafka_error_code(),
    }
}

/// A scaled-out process's commit refused because the group moved on without it.
fn is_stale_member_code(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::RebalanceInProgress
            | RDKafkaErrorCode::FencedInstanceId
    )
}

fn is_fencing_code(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced | RDKafkaErrorCode::InvalidProducerEpoch
    )
}

impl Sink {
    /// Connects and, exactly-once, calls `init_transactions`: this fences any earlier
    /// instance of the job and aborts the transaction it left open.
    pub(crate) fn connect(config: &SinkConfig<'_>, offsets: BaseConsumer, shard: Option<ShardSink>) -> Result<Sink, SinkError> {
        let init = (config.delivery == Delivery::ExactlyOnce).then_some("init_transactions");
        let producer = start_producer(config, config.transactional_id, init, true)?;
        if config.delivery == Delivery::ExactlyOnce {
            same_cluster(&producer, &offsets, config.brokers)?;
        }
        let kafka = |doing, source| SinkError::Kafka { topic: config.topics.join(", "), doing, source };
        let group = offsets.group_metadata().ok_or_else(|| {
            kafka("reading the consumer group metadata", KafkaError::Subscription("no group".into()))
        })?;
        Ok(Sink {
            job: config.job.to_string(),
            producer,
            delivery: config.delivery,
            topics: config.topics.join(", "),
            dead_letter_topic: config.dead_letter_topic.map(str::to_string),
            dead_letters: AtomicU64::new(0),
            group,
            offsets,
            member_id: shard.as_ref().map(|shard| current_member(shard).map(|(_, id)| id)).transpose()?,
            shard,
            transactional_id: config.transactional_id.to_string(),
            began: Mutex::new(Instant::now()),
            transaction_timeout: config::transaction_timeout(config.extra),
        })
    }

    /// A scaled-out process's key groups, which its commits record from now on.
    pub(crate) fn record_key_groups(&mut self, count: u32) {
        if let Some(shard) = &mut self.shard {
            shard.key_groups = Some(count);
        }
    }

    pub(crate) fn begin(&self) -> Result<(), SinkError> {
        if self.delivery == Delivery::ExactlyOnce {
            *self.began.lock().expect("lock") = Instant::now();
            self.producer.begin_transaction().map_err(|e| self.error("begin_transaction", e))?;
        }
        Ok(())
    }

    pub(crate) fn send(&self, topic: &str, batch: &Batch) -> Result<(), SinkError> {
        for record in batch.iter() {
            self.produce(topic, record, &[])?;
        }
        Ok(())
    }

    /// Writes records that crashed a plugin twice to the dead-letter topic, in the
    /// current transaction, with what happened in headers.
    pub(crate) fn send_dead_letter(&self, letter: &DeadLetter, inputs: &InputTopics) -> Result<(), SinkError> {
        let topic = self.dead_letter_topic.as_deref().expect("dead letters only flow when a topic is set");
        for (index, record) in letter.records.batch.iter().enumerate() {
            let origin = letter.records.origins.get(index);
            let (source_topic, partition) = origin.map_or(("", String::new()), |o| {
                let (_, topic, partition) = inputs.resolve(o.partition);
                (topic, partition.to_string())
            });
            let offset = origin.map(|o| o.offset.to_string()).unwrap_or_default();
            let why: [(&str, &str); 5] = [
                ("weir.error", &letter.error),
                ("weir.operator", &letter.operator),
                ("weir.source.topic", source_topic),
                ("weir.source.partition", &partition),
                ("weir.source.offset", &offset),
            ];
            self.produce(topic, record, &why)?;
        }
        self.dead_letters.fetch_add(letter.records.batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// The dead letters sent since the last call: after a commit, those it committed
    /// (the sink holds the next checkpoint's records back until then).
    pub(crate) fn take_dead_letters(&self) -> u64 {
        self.dead_letters.swap(0, Ordering::Relaxed)
    }

    /// Writes one changelog record (`checkpoint::layout` encodes it) to `partition` of
    /// `topic`, in the current transaction; `None` is a removal (a tombstone).
    pub(crate) fn send_changelog(&self, topic: &str, partition: i32, key: &[u8], value: Option<&[u8]>) -> Result<(), SinkError> {
        let mut message = BaseRecord::<[u8], [u8]>::to(topic).partition(partition).key(key);
        if let Some(value) = value {
            message = message.payload(value);
        }
        self.enqueue(message)
    }

    /// Writes checkpoint `n`'s record to the changelog, naming the job in a header.
    pub(crate) fn send_checkpoint_record(&self, topic: &str, record: &[u8]) -> Result<(), SinkError> {
        let headers = OwnedHeaders::new().insert(Header { key: layout::CHANGELOG_JOB_HEADER, value: Some(self.job.as_bytes()) });
        let message =
            BaseRecord::<[u8], [u8]>::to(topic).partition(0).key(layout::CHECKPOINT_RECORD_KEY).payload(record).headers(headers);
        self.enqueue(message)
    }

    /// Hands one record, its headers and `extra_headers` to the producer; one without
    /// a value as a tombstone (a null value).
    fn produce(&self, topic: &str, record: RecordRef<'_>, extra_headers: &[(&str, &str)]) -> Result<(), SinkError> {
        let mut message = BaseRecord::<[u8], [u8]>::to(topic).timestamp(record.timestamp);
        if !record.is_tombstone() {
            message = message.payload(record.value);
        }
        if let Some(key) = record.key {
            message = message.key(key);
        }
        // librdkafka allocates a header list even when it is empty: attach none then.
        let mut headers = record.headers().chain(extra_headers.iter().map(|(key, value)| (*key, value.as_bytes()))).peekable();
        if headers.peek().is_some() {
            let headers = headers.fold(OwnedHeaders::new(), |headers, (key, value)| {
                headers.insert(Header { key, value: Some(value) })
            });
            message = message.headers(headers);
        }
        self.enqueue(message)
    }

    fn enqueue<'a>(&self, mut message: BaseRecord<'a, [u8], [u8]>) -> Result<(), SinkError> {
        let started = Instant::now();
        loop {
            match self.producer.send(message) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    if started.elapsed() > QUEUE_FULL_LIMIT {
                        return Err(SinkError::QueueFull { topic: self.topics.clone() });
                    }
                    message = returned;
                    // Let deliveries drain the queue; the wait is bounded by the loop's limit.
                    let _ = self.flush(Duration::from_millis(50));
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), refused)) => {
                    return Err(SinkError::RecordTooLarge { topic: refused.topic.to_string(), bytes: record_bytes(&refused) });
                }
                Err((error, _)) => return Err(self.error("producing", error)),
            }
        }
    }

    /// Commits checkpoint `n`: its records and, atomically with them, the next offset
    /// of every input partition with metadata `weir:ckpt=<n>` (a scaled-out process adds
    /// the partition's greatest event time). Then opens epoch n+1.
    pub(crate) fn commit(&self, n: u64, inputs: &InputTopics, offsets: &BTreeMap<i32, PartitionState>) -> Result<(), SinkError> {
        let mut list = TopicPartitionList::new();
        for (&input, state) in offsets {
            let (_, source_topic, partition) = inputs.resolve(input);
            list.add_partition_offset(source_topic, partition, Offset::Offset(state.next_offset))
                .map_err(|e| self.error("listing offsets", e))?;
            let metadata = match &self.shard {
                Some(shard) => layout::shard_offset_metadata(&ShardMetadata {
                    n,
                    max_timestamp: Some(state.max_timestamp),
                    partitions: Some(shard.partitions),
                    shape: Some(shard.shape),
                    by: Some(shard.lowest),
                    key_groups: shard.key_groups,
                }),
                None => layout::offset_metadata(n, state.max_timestamp),
            };
            list.find_partition(source_topic, partition).expect("partition just added").set_metadata(metadata);
        }
        match self.delivery {
            Delivery::ExactlyOnce => {
                // Flushed first so that rdkafka's commit, which flushes in 100 ms sleeps,
                // finds nothing left to flush.
                self.flush(TXN_TIMEOUT).map_err(|e| self.error("flushing", e))?;
                self.refused()?;
                let member = match &self.shard {
                    Some(shard) => {
                        let (metadata, id) = current_member(shard)?;
                        if Some(&id) != self.member_id.as_ref() {
                            return Err(SinkError::NotMember);
                        }
                        Some(metadata)
                    }
                    None => None,
                };
                self.producer
                    .send_offsets_to_transaction(&list, member.as_ref().unwrap_or(&self.group), TXN_TIMEOUT)
                    .map_err(|e| self.error("send_offsets_to_transaction", e))?;
                self.producer
                    .commit_transaction(TXN_TIMEOUT)
                    .map_err(|e| self.error("commit_transaction", e))?;
                self.begin()
            }
            Delivery::AtLeastOnce => {
                self.flush(TXN_TIMEOUT).map_err(|e| self.error("flushing", e))?;
                self.delivered()?;
                self.offsets
                    .commit(&list, CommitMode::Sync)
                    .map_err(|e| self.error("committing offsets", e))
            }
        }
    }

    /// Commits what the open transaction holds, without input offsets, and opens the
    /// next (at-least-once: waits until it is delivered). For writes that are not a
    /// checkpoint's, such as rewriting the changelog before the job runs.
    pub(crate) fn commit_alone(&self) -> Result<(), SinkError> {
        self.flush(TXN_TIMEOUT).map_err(|e| self.error("flushing", e))?;
        match self.delivery {
            Delivery::ExactlyOnce => {
                self.producer.commit_transaction(TXN_TIMEOUT).map_err(|e| self.error("commit_transaction", e))?;
                self.begin()
            }
            Delivery::AtLeastOnce => self.delivered(),
        }
    }

    /// Waits until every record handed over has reached Kafka (in an exactly-once job,
    /// its open transaction, still uncommitted).
    pub(crate) fn flush_pending(&self) -> Result<(), SinkError> {
        self.flush(TXN_TIMEOUT).map_err(|e| self.error("flushing", e))
    }

    /// At-least-once, after a flush: an error if any record handed over since the last
    /// check was not delivered.
    fn delivered(&self) -> Result<(), SinkError> {
        self.refused()?;
        let failed = self.producer.context().failed.swap(0, Ordering::Relaxed);
        if failed > 0 {
            let first = self.producer.context().first_failure.lock().expect("lock").take();
            return Err(SinkError::Undelivered { topic: self.topics.clone(), count: failed, first: first.unwrap_or_default() });
        }
        Ok(())
    }

    /// Waits until every record handed to the producer is delivered or failed, at most
    /// `timeout`. rdkafka's `flush` polls in sleeps of up to 100 ms, which made every
    /// checkpoint with records in flight last 100 ms at least; librdkafka's own flush
    /// waits on a condition variable while the producer's thread serves the reports.
    fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: the client pointer is valid while `self.producer` lives.
        let code = unsafe { rdkafka::bindings::rd_kafka_flush(self.producer.client().native_ptr(), timeout_ms) };
        match RDKafkaErrorCode::from(code) {
            RDKafkaErrorCode::NoError => Ok(()),
            other => Err(KafkaError::Flush(other)),
        }
    }

    /// Drops what the open transaction holds (on shutdown, after the final commit; or
    /// after a scaled-out attempt failed). Best effort: a fenced producer cannot.
    pub(crate) fn abort(&self) {
        if self.delivery == Delivery::ExactlyOnce
            && let Err(error) = self.producer.abort_transaction(TXN_TIMEOUT)
        {
            tracing::warn!("aborting the open transaction: {error}");
        }
    }

    /// An error if the broker refused a record for what it is since the producer started.
    fn refused(&self) -> Result<(), SinkError> {
        let refused = self.producer.context().refused.lock().expect("lock").clone();
        let Some(Refused { topic, bytes, code }) = refused else { return Ok(()) };
        match refusal(code) {
            Some(why) => Err(SinkError::Refused { topic, bytes, code, why }),
            None => Err(SinkError::RefusedTooLarge { topic, bytes }),
        }
    }

    fn error(&self, doing: &'static str, source: KafkaError) -> SinkError {
        if let Err(refused) = self.refused() {
            // A commit or flush fails after the broker refused a record; the refusal is why.
            return refused;
        }
        // A send that fails with a fatal error says only "Fatal"; the producer knows why.
        let fenced = is_fencing(&source)
            || self.producer.client().fatal_error().is_some_and(|(code, _)| is_fencing_code(code));
        if fenced {
            let open_for = self.began.lock().expect("lock").elapsed();
            let open_past_timeout = (open_for > self.transaction_timeout).then_some(open_for);
            SinkError::Fenced { transactional_id: self.transactional_id.clone(), source, open_past_timeout }
        } else if self.shard.is_some() && error_code(&source).is_some_and(is_stale_member_code) {
            SinkError::StaleMember { source }
        } else {
            SinkError::Kafka { topic: self.topics.clone(), doing, source }
        }
    }

}

/// What a fencing error may mean besides another instance when the transaction was open
/// past its timeout: the broker aborts such a transaction and fences its producer.
fn aborted_note(open_past_timeout: Option<Duration>) -> String {
    match open_past_timeout {
        Some(open) => format!(
            " (or the broker aborted this instance's transaction, open {} s, past the producer's \
             transaction.timeout.ms: something held a checkpoint that long; raise transaction.timeout.ms \
             under [sink.kafka] if it may)",
            open.as_secs()
        ),
        None => String::new(),
    }
}

/// How long each client may take to name its cluster.
const CLUSTER_ID_TIMEOUT: Duration = Duration::from_secs(10);

/// An error if the producer writes to another cluster than the one the job's consumer
/// group (`offsets`) is on. A cluster that does not say its id is taken for the same.
fn same_cluster(producer: &ThreadedProducer<SinkContext>, offsets: &BaseConsumer, brokers: &str) -> Result<(), SinkError> {
    let sink = producer.client().fetch_cluster_id(CLUSTER_ID_TIMEOUT);
    let sources = offsets.client().fetch_cluster_id(CLUSTER_ID_TIMEOUT);
    match (sink, sources) {
        (Some(sink), Some(sources)) if sink != sources => Err(SinkError::OtherCluster { brokers: brokers.to_owned(), sink, sources }),
        _ => Ok(()),
    }
}

/// The key, value and headers of a record the producer reports on.
fn message_bytes(message: &BorrowedMessage<'_>) -> usize {
    let headers = message.headers().map_or(0, |headers| {
        headers.iter().map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len)).sum()
    });
    message.key().map_or(0, <[u8]>::len) + message.payload().map_or(0, <[u8]>::len) + headers
}

/// What librdkafka counts of a record against `message.max.bytes`.
fn record_bytes(record: &BaseRecord<'_, [u8], [u8]>) -> usize {
    let headers = record.headers.as_ref().map_or(0, |headers| {
        (0..headers.count()).map(|i| headers.get(i)).map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len)).sum()
    });
    record.key.map_or(0, <[u8]>::len) + record.payload.map_or(0, <[u8]>::len) + headers
}

/// The sink task: hands records to the producer, aligns barriers from its inputs and
/// holds epoch N+1 back until checkpoint N is committed.
pub(crate) struct SinkTask<'a> {
    pub(crate) sink: &'a Sink,
    /// What the origins of dead letters name.
    pub(crate) source_topics: InputTopics,
    /// The channels from every task a sink takes, each with its sink's topic.
    pub(crate) inputs: Vec<(Receiver<Message>, String)>,
    pub(crate) events: Sender<Event>,
    pub(crate) committed: Receiver<u64>,
}

impl SinkTask<'_> {
    pub(crate) fn run(self) -> Result<(), TaskFailure> {
        let mut aligned = vec![false; self.inputs.len()];
        loop {
            let mut select = Select::new();
            let open: Vec<usize> = (0..self.inputs.len()).filter(|&i| !aligned[i]).collect();
            for &i in &open {
                select.recv(&self.inputs[i].0);
            }
            let ready = select.select();
            let input = open[ready.index()];
            let Ok(message) = ready.recv(&self.inputs[input].0) else {
                return Ok(());
            };
            match message {
                Message::Records(records) => self.sink.send(&self.inputs[input].1, &records.batch)?,
                Message::DeadLetter(letter) => self.sink.send_dead_letter(&letter, &self.source_topics)?,
                Message::Watermark(_) | Message::Idle | Message::TableEnd => {}
                Message::Barrier(n) => {
                    aligned[input] = true;
                    if aligned.iter().all(|&a| a) {
                        self.events.send(Event::SinkAligned(n)).map_err(|_| TaskFailure::Stopped)?;
                        match self.committed.recv() {
                            Ok(done) => debug_assert_eq!(done, n),
                            Err(_) => return Ok(()),
                        }
                        aligned.fill(false);
                    }
                }
            }
        }
    }
}
