//! Visibility latency. `live` produces the workload's kind of records at a fixed rate with
//! event time = wall-clock time of production + the run's phase offset, then one
//! far-later flush record per partition; `watch` reads the window-count output
//! read_committed and, for each result, takes (event-time clock now - window_end): the
//! records that close a window are produced right when the clock reaches its end, so this
//! is the time from producing them to the window's result being visible. The offset moves
//! window ends relative to the system's checkpoints (which run on the wall clock), so runs
//! with different offsets measure different phases. Every run's whole output is then
//! compared exactly with the counts of the records produced.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rdkafka::consumer::Consumer;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::data::{self, Workload};
use crate::reference::{self, Diff, WindowCounts};
use crate::topics;

/// Results of windows that end this long after production starts are the first measured:
/// the system is still settling before.
const SKIP_MS: i64 = 3_000;
/// How far ahead of its due time a record may be produced (its event time is still the
/// clock's when it is produced).
const PACE_STEP: Duration = Duration::from_millis(1);
/// How long after production ends the whole output must be visible.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// How far after the last live record the flush records are: past every window's end, and
/// well inside the broker's bound on future timestamps (`log.message.timestamp.after.max.ms`,
/// 1 h by default since Kafka 4.0), which silently drops records beyond it.
const FLUSH_AFTER_MS: i64 = 60_000;

/// Counts the records the broker refused: the reference holds only what was produced,
/// so a refused record fails the run instead of showing up as the system's error.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            self.first.lock().expect("deliveries").get_or_insert_with(|| e.to_string());
        }
    }
}

/// The run's event-time clock: monotonic, wall-clock time at its creation plus the offset.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin_ms: i64,
    started: Instant,
}

impl Clock {
    fn new(offset_ms: i64) -> Self {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        Self { origin_ms: wall + offset_ms, started: Instant::now() }
    }

    fn now_ms(&self) -> i64 {
        self.origin_ms + self.started.elapsed().as_millis() as i64
    }
}

/// What `live` produced.
struct Produced {
    achieved_rate: f64,
    /// Sorted digests of the window-count output these records must give.
    expected: Vec<u128>,
    /// Windows ending at or before this were closed by live records on every partition
    /// (later ones only by the flush records, so their latency means nothing).
    closed_live_until: i64,
}

/// Produces `rate` records/s for `seconds` (event time = the clock), then the flush records.
fn live(spec: &Spec<'_>, clock: Clock) -> anyhow::Result<Produced> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", spec.brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .create_with_context(Deliveries::default())
        .with_context(|| format!("creating a producer on {}", spec.brokers))?;
    let started = Instant::now();
    let mut counts = WindowCounts::new(spec.window_ms);
    let mut last_ts = vec![i64::MIN; spec.workload.partitions as usize];
    let mut sent = 0u64;
    for mut rec in spec.workload.records() {
        // Pace: record n goes out at n / rate seconds, or up to `PACE_STEP` before: a
        // wait for every record would keep a core of the machine under test busy polling.
        let due = Duration::from_secs_f64(sent as f64 / spec.rate as f64);
        let elapsed = started.elapsed();
        if due > elapsed + PACE_STEP {
            topics::pause(&producer, due - elapsed);
        }
        rec.ts = clock.now_ms();
        let (key, value) = (data::key(rec.key), data::value(&rec));
        send(&producer, BaseRecord::to(spec.input).partition(rec.partition).key(key.as_str()).payload(value.as_str()).timestamp(rec.ts))?;
        counts.add(rec.key, rec.ts);
        last_ts[rec.partition as usize] = rec.ts;
        sent += 1;
        if sent.is_multiple_of(256) {
            producer.poll(Duration::ZERO);
        }
    }
    let achieved_rate = sent as f64 / started.elapsed().as_secs_f64();
    let flush_ts = clock.now_ms() + FLUSH_AFTER_MS;
    for p in 0..spec.workload.partitions {
        let value = data::flush_value(p);
        let key = spec.workload.flush_key(p);
        send(&producer, BaseRecord::to(spec.input).partition(p).key(key.as_str()).payload(value.as_str()).timestamp(flush_ts))?;
    }
    producer.flush(topics::WAIT).with_context(|| format!("flushing the last records to {}", spec.input))?;
    producer.poll(Duration::ZERO);
    let failed = producer.context().failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = producer.context().first.lock().expect("deliveries").clone().unwrap_or_default();
        bail!("{failed} records were not delivered to {} (the first: {first})", spec.input);
    }
    let closed_live_until = last_ts.iter().copied().min().unwrap_or(i64::MIN);
    Ok(Produced { achieved_rate, expected: counts.digests(), closed_live_until })
}

fn send(producer: &BaseProducer<Deliveries>, mut record: BaseRecord<'_, str, str>) -> anyhow::Result<()> {
    let deadline = Instant::now() + topics::WAIT;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), back)) if Instant::now() < deadline => {
                record = back;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, back)) => bail!("producing to {}: {e}", back.topic),
        }
    }
}

/// One visible result: its window's end and how long after that end (event-time clock)
/// it became visible.
struct Sample {
    window_end: i64,
    latency_ms: i64,
}

/// Watches `topic` until `target` results are visible (`target` is set once production
/// ends) or `deadline` passes.
fn watch(brokers: &str, topic: &str, partitions: i32, clock: Clock, target: &AtomicUsize, deadline: Instant) -> anyhow::Result<Vec<Sample>> {
    let consumer = topics::consumer(brokers, &format!("weir-bench-latency-{topic}"))?;
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&list)?;
    let mut samples = Vec::new();
    let mut errors = 0u32;
    while Instant::now() < deadline && samples.len() < target.load(Ordering::Acquire) {
        match consumer.poll(Duration::from_millis(20)) {
            Some(Ok(m)) => {
                let seen = clock.now_ms();
                let value = m.payload().unwrap_or_default();
                let end = window_end(value).with_context(|| format!("no window_end in {}", String::from_utf8_lossy(value)))?;
                samples.push(Sample { window_end: end, latency_ms: seen - end });
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => crate::measure::transient(&mut errors, &e, topic)?,
        }
    }
    Ok(samples)
}

fn window_end(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = &text[text.find("\"window_end\":")? + "\"window_end\":".len()..];
    rest[..rest.find(|c: char| !c.is_ascii_digit())?].parse().ok()
}

pub(crate) struct Spec<'a> {
    pub(crate) system: &'a str,
    pub(crate) brokers: &'a str,
    pub(crate) input: &'a str,
    pub(crate) output: &'a str,
    pub(crate) workload: Workload,
    pub(crate) rate: u64,
    pub(crate) warmup: Duration,
    pub(crate) checkpoint_ms: u64,
    /// The job's window size.
    pub(crate) window_ms: i64,
    /// Event time minus wall-clock time: sets where window ends fall between checkpoints.
    pub(crate) offset_ms: i64,
    /// Which of the phases this is (only recorded).
    pub(crate) run: u32,
    pub(crate) log: &'a std::path::Path,
    pub(crate) command: &'a [String],
}

#[derive(Debug, serde::Serialize)]
pub(crate) struct Outcome {
    pub(crate) system: String,
    pub(crate) kind: &'static str,
    pub(crate) checkpoint_ms: u64,
    pub(crate) window_ms: i64,
    pub(crate) offset_ms: i64,
    pub(crate) run: u32,
    pub(crate) rate: u64,
    pub(crate) achieved_rate: f64,
    pub(crate) samples: usize,
    pub(crate) p50_ms: Option<i64>,
    pub(crate) p99_ms: Option<i64>,
    pub(crate) max_ms: Option<i64>,
    pub(crate) correct: bool,
    pub(crate) diff: Diff,
    pub(crate) note: String,
}

/// Creates the topics, starts the system, lets it warm up, then produces at `rate` while
/// watching the output; stops the system, checks its whole output and returns the figures.
pub(crate) fn run(spec: &Spec<'_>) -> anyhow::Result<Outcome> {
    topics::create(spec.brokers, spec.input, spec.workload.partitions)?;
    topics::create(spec.brokers, spec.output, spec.workload.partitions)?;
    let mut child = crate::measure::start_group(spec.command, spec.log)?;
    let pid = child.id() as i32;
    std::thread::sleep(spec.warmup);
    let clock = Clock::new(spec.offset_ms);
    let skip_before = clock.now_ms() + SKIP_MS;
    let target = Arc::new(AtomicUsize::new(usize::MAX));
    let production = Duration::from_secs_f64(spec.workload.records as f64 / spec.rate as f64);
    let watcher = {
        let (brokers, output, partitions, target) = (spec.brokers.to_owned(), spec.output.to_owned(), spec.workload.partitions, target.clone());
        let deadline = Instant::now() + production + DRAIN_LIMIT;
        std::thread::spawn(move || watch(&brokers, &output, partitions, clock, &target, deadline))
    };
    let produced = live(spec, clock);
    target.store(produced.as_ref().map_or(0, |p| p.expected.len()), Ordering::Release);
    let watched = watcher.join().map_err(|_| anyhow::anyhow!("the latency watcher panicked"))?;
    let exited = child.try_wait()?;
    crate::measure::stop_group(&mut child, pid);
    let (produced, samples) = (produced?, watched?);

    let observed = crate::measure::read_all(spec.brokers, spec.output, spec.workload.partitions)?;
    let diff = reference::compare(&produced.expected, &observed);
    let mut lat: Vec<i64> = samples
        .iter()
        .filter(|s| s.window_end >= skip_before && s.window_end <= produced.closed_live_until)
        .map(|s| s.latency_ms)
        .collect();
    lat.sort_unstable();
    let note = match exited {
        Some(status) => format!("{} exited during the run ({status}); see {}", spec.system, spec.log.display()),
        None if samples.len() < produced.expected.len() => {
            format!("{} of {} results visible {DRAIN_LIMIT:?} after production ended", samples.len(), produced.expected.len())
        }
        None if lat.is_empty() => format!("no window ended between {SKIP_MS} ms into production and its end: produce for longer"),
        None => String::new(),
    };
    let q = |p: f64| (!lat.is_empty()).then(|| lat[((lat.len() as f64 - 1.0) * p).round() as usize]);
    Ok(Outcome {
        system: spec.system.to_owned(),
        kind: "latency",
        checkpoint_ms: spec.checkpoint_ms,
        window_ms: spec.window_ms,
        offset_ms: spec.offset_ms,
        run: spec.run,
        rate: spec.rate,
        achieved_rate: produced.achieved_rate,
        samples: lat.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        max_ms: lat.last().copied(),
        correct: note.is_empty() && diff.exact(),
        diff,
        note,
    })
}
