//! Kafka admin for the benchmark: create and delete its topics, read end offsets and a
//! group's committed offsets. Every call has a deadline. Also the pause of a paced
//! producer.

use std::time::Duration;

use anyhow::{Context, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, ProducerContext};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Sleeps `wait`, then serves the producer's delivery reports. Not `poll(wait)`:
/// rdkafka 0.38 waits in whole milliseconds and polls again with 0 ms until its
/// deadline, so a paced producer that waited in `poll` spun through the last
/// millisecond of every wait, about half a core of the machine under test at 50 k
/// records/s.
pub(crate) fn pause<C: ProducerContext>(producer: &BaseProducer<C>, wait: Duration) {
    std::thread::sleep(wait);
    producer.poll(Duration::ZERO);
}

fn admin(brokers: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new().set("bootstrap.servers", brokers).create().with_context(|| format!("connecting to {brokers}"))
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

pub(crate) fn create(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let admin = admin(brokers)?;
    let new = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
    let results = runtime()?
        .block_on(admin.create_topics(&new, &AdminOptions::new().operation_timeout(Some(WAIT))))
        .with_context(|| format!("creating topic {topic} on {brokers}; is the broker up (scripts/kafka/kafka start)?"))?;
    for result in results {
        result.map_err(|(topic, code)| anyhow::anyhow!("creating topic {topic}: {code}"))?;
    }
    Ok(())
}

pub(crate) fn delete(brokers: &str, topics: &[String]) -> anyhow::Result<()> {
    let admin = admin(brokers)?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let results = runtime()?.block_on(admin.delete_topics(&names, &AdminOptions::new().operation_timeout(Some(WAIT))))?;
    for result in results {
        if let Err((topic, code)) = result {
            eprintln!("weir-bench: deleting topic {topic}: {code}");
        }
    }
    Ok(())
}

pub(crate) fn consumer(brokers: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // librdkafka's 1 s default would let a full read-ahead delay what the
        // harness sees, and so every figure it measures.
        .set("fetch.queue.backoff.ms", "10")
        .create()
        .with_context(|| format!("creating a consumer on {brokers}"))
}

/// High watermark of each partition (the input is written without transactions, so this
/// is its record count per partition).
pub(crate) fn end_offsets(consumer: &BaseConsumer, topic: &str, partitions: i32) -> anyhow::Result<Vec<i64>> {
    (0..partitions)
        .map(|p| Ok(consumer.fetch_watermarks(topic, p, WAIT).with_context(|| format!("end offset of {topic}/{p}"))?.1))
        .collect()
}

/// The offsets `group` committed on `topic` (-1 where none).
pub(crate) fn committed(consumer: &BaseConsumer, topic: &str, partitions: i32) -> anyhow::Result<Vec<i64>> {
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    let list = consumer.committed_offsets(list, WAIT).with_context(|| format!("committed offsets on {topic}"))?;
    (0..partitions)
        .map(|p| match list.find_partition(topic, p).map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Ok(o),
            Some(_) => Ok(-1),
            None => bail!("no committed offset entry for {topic}/{p}"),
        })
        .collect()
}

/// Returns once `group` has committed every partition of `topic` at its end offset;
/// fails after `timeout`. Polls every 100 ms.
pub(crate) fn wait_drained(brokers: &str, group: &str, topic: &str, partitions: i32, timeout: Duration) -> anyhow::Result<()> {
    let consumer = consumer(brokers, group)?;
    let ends = end_offsets(&consumer, topic, partitions)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let committed = committed(&consumer, topic, partitions)?;
        if committed.iter().zip(&ends).all(|(c, e)| c >= e) {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("group {group} committed {committed:?} of {topic}, whose ends are {ends:?}, after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
