//! The physical limit: copies the input topic to the output topic in Kafka transactions,
//! each committing the copied records with the input offsets (send_offsets_to_transaction)
//! every interval. No parsing, no state: what any exactly-once job pays at least.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::topics;

pub(crate) struct Copier<'a> {
    pub(crate) brokers: &'a str,
    pub(crate) input: &'a str,
    pub(crate) output: &'a str,
    pub(crate) partitions: i32,
    /// Consumer group and transactional.id.
    pub(crate) name: &'a str,
    pub(crate) commit_every: Duration,
}

impl Copier<'_> {
    /// Runs until killed.
    pub(crate) fn run(&self) -> anyhow::Result<()> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers)
            .set("group.id", self.name)
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            // As in weir's sources: librdkafka's 1 s default backoff on a full
            // read-ahead starves a reader that drains it faster than that.
            .set("fetch.queue.backoff.ms", "10")
            .create()
            .context("creating the copier's consumer")?;
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers)
            .set("transactional.id", self.name)
            .set("linger.ms", "5")
            .set("batch.size", "1000000")
            .set("queue.buffering.max.messages", "500000")
            .set("transaction.timeout.ms", "60000")
            // A failed delivery fails the commit; reports of successes are only cost.
            .set("delivery.report.only.error", "true")
            .create()
            .context("creating the copier's producer")?;
        producer.init_transactions(topics::WAIT).context("init_transactions")?;
        let mut next = vec![-1i64; self.partitions as usize];
        let mut assignment = TopicPartitionList::new();
        for p in 0..self.partitions {
            assignment.add_partition_offset(self.input, p, Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;
        let group = consumer.group_metadata().context("the copier's consumer has no group metadata")?;

        producer.begin_transaction()?;
        let mut dirty = false;
        let mut epoch_start = Instant::now();
        loop {
            if let Some(message) = consumer.poll(Duration::from_millis(20)) {
                let message = message.with_context(|| format!("reading {}", self.input))?;
                let p = message.partition();
                let mut record = BaseRecord::to(self.output).partition(p);
                if let Some(key) = message.key() {
                    record = record.key(key);
                }
                if let Some(payload) = message.payload() {
                    record = record.payload(payload);
                }
                if let Some(ts) = message.timestamp().to_millis() {
                    record = record.timestamp(ts);
                }
                send(&producer, record)?;
                next[p as usize] = message.offset() + 1;
                dirty = true;
            }
            producer.poll(Duration::ZERO);
            if epoch_start.elapsed() >= self.commit_every {
                if dirty {
                    let mut offsets = TopicPartitionList::new();
                    for (p, &o) in next.iter().enumerate() {
                        if o >= 0 {
                            offsets.add_partition_offset(self.input, p as i32, Offset::Offset(o))?;
                        }
                    }
                    flush(&producer)?;
                    producer.send_offsets_to_transaction(&offsets, &group, topics::WAIT).context("send_offsets_to_transaction")?;
                    producer.commit_transaction(topics::WAIT).context("commit_transaction")?;
                    producer.begin_transaction()?;
                    dirty = false;
                }
                epoch_start = Instant::now();
            }
        }
    }
}

/// Waits until every record is delivered, at most `topics::WAIT`. librdkafka's flush
/// waits on a condition variable; rdkafka's (called by its commit_transaction) sleeps
/// in steps of up to 100 ms, a tenth of every 1 s epoch. A failed delivery stays
/// counted until its report is served, so reports are served between waits.
fn flush(producer: &BaseProducer) -> anyhow::Result<()> {
    let deadline = Instant::now() + topics::WAIT;
    loop {
        // SAFETY: the client pointer is valid while `producer` lives.
        let code = unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), 100) };
        match RDKafkaErrorCode::from(code) {
            RDKafkaErrorCode::NoError => return Ok(()),
            RDKafkaErrorCode::OperationTimedOut if Instant::now() < deadline => producer.poll(Duration::ZERO),
            other => bail!("flushing the copier's producer: {other}"),
        }
    }
}

fn send(producer: &BaseProducer, mut record: BaseRecord<'_, [u8], [u8]>) -> anyhow::Result<()> {
    let deadline = Instant::now() + topics::WAIT;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if Instant::now() < deadline => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, back)) => bail!("producing to {}: {e}", back.topic),
        }
    }
}
