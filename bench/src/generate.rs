//! The generator: produces the seeded workload (then one flush record per partition) as
//! fast as the broker takes it, or at a given rate, idempotently, and reports records/s.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

use crate::data::{self, Workload};
use crate::topics;

pub(crate) struct Report {
    pub(crate) records: u64,
    pub(crate) seconds: f64,
    pub(crate) bytes: u64,
}

/// Records sent between two checks of a paced generator's schedule.
const PACE_EVERY: usize = 256;

pub(crate) fn run(brokers: &str, topic: &str, workload: &Workload, flush: bool, rate: Option<u32>) -> anyhow::Result<Report> {
    topics::create(brokers, topic, workload.partitions)?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "10")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "500000")
        .set("queue.buffering.max.kbytes", "262144")
        .create()
        .with_context(|| format!("creating a producer on {brokers}"))?;
    eprintln!("weir-bench gen: producing to {topic}");
    let started = Instant::now();
    let mut bytes = 0u64;
    let step = (workload.records / 10).max(1);
    for (i, rec) in workload.records().enumerate() {
        let (key, value) = (data::key(rec.key), data::value(&rec));
        bytes += (key.len() + value.len()) as u64;
        send(&producer, BaseRecord::to(topic).partition(rec.partition).key(key.as_str()).payload(value.as_str()).timestamp(rec.ts))?;
        if i % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
        if let Some(rate) = rate.filter(|_| i % PACE_EVERY == 0) {
            // Ahead of the schedule: wait until record i is due.
            let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)));
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        if (i as u64 + 1).is_multiple_of(step) {
            eprintln!("weir-bench gen: {} of {} records", i + 1, workload.records);
        }
    }
    for p in (0..workload.partitions).filter(|_| flush) {
        let (key, value) = (workload.flush_key(p), data::flush_value(p));
        let record = BaseRecord::to(topic).partition(p).key(key.as_str()).payload(value.as_str()).timestamp(workload.flush_ts());
        send(&producer, record)?;
    }
    producer.flush(topics::WAIT).with_context(|| format!("flushing the last records to {topic}"))?;
    Ok(Report { records: workload.records, seconds: started.elapsed().as_secs_f64(), bytes })
}

/// Sends, waiting (bounded) while librdkafka's queue is full.
fn send(producer: &BaseProducer, mut record: BaseRecord<'_, str, str>) -> anyhow::Result<()> {
    let deadline = Instant::now() + topics::WAIT;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) if Instant::now() < deadline => {
                record = back;
                producer.poll(Duration::from_millis(5));
            }
            Err((e, back)) => bail!("producing to {}/{:?}: {e}", back.topic, back.partition),
        }
    }
}
