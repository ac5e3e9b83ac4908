//! What the integration tests share: where the broker is, fresh topics, and reading a
//! topic back to its end under either isolation level. Every wait has a deadline.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

pub mod broker;
pub mod clicks;
pub mod graph;
pub mod job;

pub const WAIT: Duration = Duration::from_secs(30);

/// The broker the tests run against: `scripts/kafka/kafka start` puts one on 9092; a
/// test that holds a `broker::PrivateBroker` runs against that one instead.
pub fn brokers() -> String {
    broker::private()
        .or_else(|| std::env::var("WEIR_TEST_BROKERS").ok())
        .unwrap_or_else(|| "127.0.0.1:9092".to_string())
}

/// A name no earlier run used, so tests never see each other's records.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

pub fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]);
}

/// `create_topic` with topic configs, e.g. `("cleanup.policy", "compact")`.
pub fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("admin client");
    let topic = configs
        .iter()
        .fold(NewTopic::new(name, partitions, TopicReplication::Fixed(1)), |topic, (key, value)| topic.set(key, value));
    let options = AdminOptions::new().operation_timeout(Some(WAIT));
    let results = block_on(admin.create_topics([&topic], &options))
        .unwrap_or_else(|e| panic!("creating topic {name} on {}: {e}; is the broker up (scripts/kafka/kafka start)?", brokers()));
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("creating topic {topic}: {code}"));
    }
}

pub fn transactional_producer(transactional_id: &str) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", "60000")
        .create()
        .expect("transactional producer");
    producer.init_transactions(WAIT).expect("init_transactions");
    producer
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    ReadCommitted,
    ReadUncommitted,
}

/// One record read back: (partition, key, value).
pub type Read = (i32, Option<Vec<u8>>, Vec<u8>);

/// Reads every partition of `topic` from the beginning up to its current end, as seen
/// at `isolation`. Under read_committed the end is reached only once no transaction on
/// the topic is open, so callers must finish or abort theirs first.
pub fn read_to_end(topic: &str, partitions: i32, isolation: Isolation) -> Vec<Read> {
    read_each(topic, partitions, isolation, |message| {
        (message.partition(), message.key().map(<[u8]>::to_vec), message.payload().unwrap_or_default().to_vec())
    })
}

/// A record's key and value, a value `None` for a tombstone.
pub type Nullable = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Each record's key and value, a value `None` for a tombstone (where `read_to_end`
/// reads an empty value).
pub fn read_nullable(topic: &str, partitions: i32, isolation: Isolation) -> Vec<Nullable> {
    read_each(topic, partitions, isolation, |message| (message.key().map(<[u8]>::to_vec), message.payload().map(<[u8]>::to_vec)))
}

/// One record read back with its headers: (partition, key, value, headers).
pub type ReadWithHeaders = (i32, Option<Vec<u8>>, Vec<u8>, Vec<(String, Vec<u8>)>);

/// As `read_to_end`, with each record's headers.
pub fn read_to_end_with_headers(topic: &str, partitions: i32, isolation: Isolation) -> Vec<ReadWithHeaders> {
    use rdkafka::message::Headers;
    read_each(topic, partitions, isolation, |message| {
        let headers = message
            .headers()
            .map(|headers| {
                headers.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect()
            })
            .unwrap_or_default();
        (message.partition(), message.key().map(<[u8]>::to_vec), message.payload().unwrap_or_default().to_vec(), headers)
    })
}

fn read_each<T>(
    topic: &str,
    partitions: i32,
    isolation: Isolation,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> T,
) -> Vec<T> {
    let level = match isolation {
        Isolation::ReadCommitted => "read_committed",
        Isolation::ReadUncommitted => "read_uncommitted",
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique_name("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", level)
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    let mut ends = Vec::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assignment");
        let (_, high) = consumer
            .fetch_watermarks(topic, partition, WAIT)
            .expect("watermarks");
        ends.push(high);
    }
    consumer.assign(&assignment).expect("assign");
    let deadline = Instant::now() + WAIT;
    let mut records = Vec::new();
    while !reached(&consumer, topic, &ends) {
        assert!(
            Instant::now() < deadline,
            "reading {topic} ({level}) did not reach offsets {ends:?} within {WAIT:?}"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            records.push(each(&message.expect("consume")));
        }
    }
    records
}

fn reached(consumer: &BaseConsumer, topic: &str, ends: &[i64]) -> bool {
    let position = consumer.position().expect("position");
    ends.iter().enumerate().all(|(partition, &end)| {
        end == 0
            || matches!(
                position.find_partition(topic, partition as i32).map(|e| e.offset()),
                Some(Offset::Offset(at)) if at >= end
            )
    })
}

/// Runs a future to completion on a small runtime: the admin API is async, tests are not.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// Produces `records` as (partition, key, value, timestamp) in one transaction-free
/// idempotent producer, and waits until every one is acknowledged.
pub fn produce(topic: &str, records: &[(i32, Vec<u8>, Vec<u8>, i64)]) {
    let producer = input_producer();
    send(&producer, topic, records);
    producer.flush(WAIT).expect("flush");
}

/// One record without a key (not an empty one) to `partition`, at event time 2 000.
pub fn produce_keyless(topic: &str, partition: i32, value: &[u8]) {
    use rdkafka::producer::BaseRecord;
    let producer = input_producer();
    let record = BaseRecord::<(), [u8]>::to(topic).partition(partition).payload(value).timestamp(2_000);
    producer.send(record).map_err(|(error, _)| error).expect("send a keyless record");
    producer.flush(WAIT).expect("flush");
}

/// A transaction-free idempotent producer for test input.
pub fn input_producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer")
}

/// Hands `records` to `producer`, waiting while its queue is full; does not flush.
pub fn send(producer: &BaseProducer, topic: &str, records: &[(i32, Vec<u8>, Vec<u8>, i64)]) {
    use rdkafka::producer::BaseRecord;
    for (partition, key, value, timestamp) in records {
        let mut record = BaseRecord::to(topic)
            .partition(*partition)
            .key(key)
            .payload(value)
            .timestamp(*timestamp);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => panic!("producing to {topic}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
}

/// The directory the example plugins are built into by `scripts/build-plugins`.
pub fn plugins_dir() -> std::path::PathBuf {
    std::env::var_os("WEIR_PLUGINS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins"))
}

/// A built example plugin; fails (never skips) when it was not built.
pub fn plugin(name: &str) -> std::path::PathBuf {
    let path = plugins_dir().join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-plugins first", path.display());
    path
}

/// A read_committed reader that follows a topic while a job writes it.
pub struct Tail {
    consumer: BaseConsumer,
    pub records: Vec<Read>,
}

impl Tail {
    pub fn new(topic: &str, partitions: i32) -> Tail {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", unique_name("tail"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        for partition in 0..partitions {
            assignment.add_partition_offset(topic, partition, Offset::Beginning).expect("assignment");
        }
        consumer.assign(&assignment).expect("assign");
        Tail { consumer, records: Vec::new() }
    }

    /// Reads until at least `count` records have been seen, for at most `within`.
    pub fn until(&mut self, count: usize, within: Duration) -> bool {
        self.read_until(count, within, || true)
    }

    /// As `until`, but gives up as soon as the job writing the topic has exited.
    pub fn until_while(&mut self, count: usize, within: Duration, writer: &mut std::process::Child) -> bool {
        self.read_until(count, within, || matches!(writer.try_wait(), Ok(None)))
    }

    fn read_until(&mut self, count: usize, within: Duration, mut writer_alive: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + within;
        while self.records.len() < count {
            if Instant::now() >= deadline || !writer_alive() {
                return false;
            }
            if let Some(message) = self.consumer.poll(Duration::from_millis(100)) {
                let message = message.expect("consume");
                self.records.push((
                    message.partition(),
                    message.key().map(<[u8]>::to_vec),
                    message.payload().unwrap_or_default().to_vec(),
                ));
            }
        }
        true
    }
}

/// Grows `topic` to `partitions` partitions.
pub fn add_partitions(topic: &str, partitions: usize) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers()).create().expect("admin client");
    let results = block_on(admin.create_partitions([&NewPartitions::new(topic, partitions)], &AdminOptions::new()))
        .unwrap_or_else(|e| panic!("adding partitions to {topic}: {e}"));
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("adding partitions to {topic}: {code}"));
    }
}

/// Deletes the records of `partition` below `before`, as retention would.
pub fn delete_records(topic: &str, partition: i32, before: i64) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("admin client");
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(topic, partition, Offset::Offset(before)).expect("offsets");
    let options = AdminOptions::new().operation_timeout(Some(WAIT));
    let result = block_on(admin.delete_records(&offsets, &options)).expect("delete_records");
    for element in result.elements() {
        element.error().unwrap_or_else(|e| panic!("deleting records of {topic}/{partition}: {e}"));
    }
}

/// Whether the broker lists topic `name` (asked for every topic: a request for one
/// topic may have the broker create it).
pub fn topic_exists(name: &str) -> bool {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers()).create().expect("consumer");
    let metadata = consumer.fetch_metadata(None, WAIT).expect("metadata");
    metadata.topics().iter().any(|t| t.name() == name && t.error().is_none())
}

/// How many partitions topic `name` has (0 if the broker does not list it).
pub fn partition_count(name: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers()).create().expect("consumer");
    let metadata = consumer.fetch_metadata(None, WAIT).expect("metadata");
    metadata.topics().iter().find(|t| t.name() == name && t.error().is_none()).map_or(0, |t| t.partitions().len())
}

/// Deletes topic `name`, and waits until the broker no longer lists it.
pub fn delete_topic(name: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("admin client");
    let options = AdminOptions::new().operation_timeout(Some(WAIT));
    for result in block_on(admin.delete_topics(&[name], &options)).expect("delete_topics") {
        result.unwrap_or_else(|(topic, code)| panic!("deleting topic {topic}: {code}"));
    }
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers()).create().expect("consumer");
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let metadata = consumer.fetch_metadata(Some(name), WAIT).expect("metadata");
        if metadata.topics().iter().all(|t| t.name() != name || t.error().is_some() || t.partitions().is_empty()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("topic {name} still listed {WAIT:?} after its deletion");
}

/// The seed of the random kill points: `WEIR_CRASH_SEED` replays a failed run.
pub fn crash_seed() -> u64 {
    let seed = std::env::var("WEIR_CRASH_SEED").ok().and_then(|n| n.parse().ok()).unwrap_or_else(|| {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_nanos();
        (nanos as u64) | 1
    });
    eprintln!("crash seed {seed} (replay with WEIR_CRASH_SEED={seed})");
    seed
}

/// xorshift64: the next pseudo-random number of `state`.
pub fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// The committed offsets of `group` on `topic`, with their metadata, for the partitions
/// that have one.
pub fn committed_with_metadata(group: &str, topic: &str, partitions: i32) -> Vec<(i32, i64, String)> {
    try_committed_with_metadata(group, topic, partitions).expect("committed offsets")
}

/// As `committed_with_metadata`, or the error of the broker's answer, which a poll
/// takes as "not yet": a group coordinator that moves or loads answers with one.
pub fn try_committed_with_metadata(group: &str, topic: &str, partitions: i32) -> KafkaResult<Vec<(i32, i64, String)>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    let committed = consumer.committed_offsets(list, WAIT)?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(offset) => Some((e.partition(), offset, e.metadata().to_string())),
            _ => None,
        })
        .collect())
}

/// The committed offsets of `group` on `topic`, for the partitions that have one.
pub fn committed_offsets(group: &str, topic: &str, partitions: i32) -> std::collections::BTreeMap<i32, i64> {
    committed_with_metadata(group, topic, partitions).into_iter().map(|(partition, offset, _)| (partition, offset)).collect()
}

/// Where `partition` of `topic` ends now.
pub fn end_offset(topic: &str, partition: i32) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", brokers()).create().expect("consumer");
    consumer.fetch_watermarks(topic, partition, WAIT).expect("watermarks").1
}
