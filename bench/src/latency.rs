//! Visibility latency. `live` produces the workload's kind of records at a fixed rate with
//! event time = wall-clock time of production; `watch` reads a window-count output
//! read_committed and, for each result, takes (now - window_end): the record that closes
//! a window is produced right at its end, so this is the time from producing the closing
//! record to the window's result being visible. Same clock: one machine.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::data::{self, Workload};
use crate::topics;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Produces `rate` records/s for `seconds` (event time = now), then returns the rate achieved.
pub fn live(brokers: &str, topic: &str, workload: &Workload, rate: u64, seconds: u64) -> anyhow::Result<f64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .create()
        .with_context(|| format!("creating a producer on {brokers}"))?;
    let started = Instant::now();
    let total = rate * seconds;
    let mut sent = 0u64;
    for mut rec in workload.records().take(total as usize) {
        // Pace: record n goes out at n / rate seconds.
        let due = Duration::from_secs_f64(sent as f64 / rate as f64);
        let elapsed = started.elapsed();
        if due > elapsed {
            producer.poll(due - elapsed);
        }
        rec.ts = now_ms();
        let (key, value) = (data::key(rec.key), data::value(&rec));
        let mut record = BaseRecord::to(topic).partition(rec.partition).key(key.as_str()).payload(value.as_str()).timestamp(rec.ts);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("producing to {topic}: {e}"),
            }
        }
        sent += 1;
        if sent % 256 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(topics::WAIT)?;
    Ok(sent as f64 / started.elapsed().as_secs_f64())
}

pub struct Latencies {
    pub samples: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Watches `topic` for `seconds`, ignoring windows that ended before `skip_before_ms`.
pub fn watch(brokers: &str, topic: &str, partitions: i32, seconds: u64, skip_before_ms: i64) -> anyhow::Result<Latencies> {
    let consumer = topics::consumer(brokers, &format!("weir-bench-latency-{topic}"))?;
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&list)?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut lat = Vec::new();
    let mut errors = 0u32;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(20)) {
            Some(Ok(m)) => {
                let seen = now_ms();
                let value = m.payload().unwrap_or_default();
                let end = window_end(value).with_context(|| format!("no window_end in {}", String::from_utf8_lossy(value)))?;
                if end >= skip_before_ms {
                    lat.push((seen - end) as f64);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => crate::measure::transient(&mut errors, &e, topic)?,
        }
    }
    if lat.is_empty() {
        bail!("no window results were visible on {topic} within {seconds} s");
    }
    lat.sort_by(f64::total_cmp);
    let q = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize];
    Ok(Latencies { samples: lat.len(), p50_ms: q(0.5), p99_ms: q(0.99), max_ms: *lat.last().expect("non-empty") })
}

fn window_end(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = &text[text.find("\"window_end\":")? + "\"window_end\":".len()..];
    rest[..rest.find(|c: char| !c.is_ascii_digit())?].parse().ok()
}

pub struct Spec<'a> {
    pub system: &'a str,
    pub brokers: &'a str,
    pub input: &'a str,
    pub output: &'a str,
    pub workload: Workload,
    pub rate: u64,
    pub seconds: u64,
    pub warmup: Duration,
    pub checkpoint_ms: u64,
    pub log: &'a std::path::Path,
    pub command: &'a [String],
}

/// Creates the topics, starts the system, lets it warm up, then produces at `rate` while
/// watching the output; stops the system and returns the figures as JSON.
pub fn run(spec: &Spec<'_>) -> anyhow::Result<serde_json::Value> {
    topics::create(spec.brokers, spec.input, spec.workload.partitions)?;
    topics::create(spec.brokers, spec.output, spec.workload.partitions)?;
    let mut child = crate::measure::start_group(spec.command, spec.log)?;
    let pid = child.id() as i32;
    std::thread::sleep(spec.warmup);
    let skip_before = now_ms() + 3_000;
    let watcher = {
        let (brokers, output, partitions, seconds) = (spec.brokers.to_owned(), spec.output.to_owned(), spec.workload.partitions, spec.seconds + 5);
        std::thread::spawn(move || watch(&brokers, &output, partitions, seconds, skip_before))
    };
    let achieved = live(spec.brokers, spec.input, &spec.workload, spec.rate, spec.seconds);
    let watched = watcher.join().map_err(|_| anyhow::anyhow!("the latency watcher panicked"))?;
    let exited = child.try_wait()?;
    crate::measure::stop_group(&mut child, pid);
    if let Some(status) = exited {
        bail!("{} exited during the latency run ({status}); see {}", spec.system, spec.log.display());
    }
    let (achieved, l) = (achieved?, watched?);
    Ok(serde_json::json!({
        "system": spec.system, "kind": "latency", "checkpoint_ms": spec.checkpoint_ms,
        "rate": spec.rate, "achieved_rate": achieved, "samples": l.samples,
        "p50_ms": l.p50_ms, "p99_ms": l.p99_ms, "max_ms": l.max_ms,
    }))
}
