//! How long the partitions of a scaled-out weir job stay without output when one of its
//! processes dies. Input arrives keyed at a fixed rate with event time = the clock, and
//! the job (a pass-through behind `key_by`) writes each record to the output partition
//! of its input partition. `--kills` times, one process is SIGKILLed; the time until
//! every one of its partitions shows, read_committed, a record that arrived after the
//! kill is its failover time; then it is started again and the job settles. At the end
//! the whole output is checked against the input: nothing lost, nothing twice.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, Timestamp};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::data::{self, Workload};
use crate::{measure, reference, topics};

/// What a weir process logs when it runs a set of partitions.
const RUNNING: &str = "restored this process's partitions; running";
/// How long the job may take to settle, or a failover to complete, before the run fails.
const SETTLE: Duration = Duration::from_secs(120);

pub(crate) struct Spec<'a> {
    pub(crate) brokers: &'a str,
    pub(crate) input: &'a str,
    pub(crate) output: &'a str,
    pub(crate) partitions: i32,
    pub(crate) processes: usize,
    pub(crate) kills: usize,
    /// Input records per second.
    pub(crate) rate: u64,
    /// `weir run <job> ...`: the job file reads `input` and writes `output`.
    pub(crate) command: &'a [String],
    /// Where each process's log goes (`weir-<i>.log`).
    pub(crate) logs: &'a Path,
}

pub(crate) fn run(spec: &Spec<'_>) -> anyhow::Result<()> {
    topics::create(spec.brokers, spec.input, spec.partitions)?;
    topics::create(spec.brokers, spec.output, spec.partitions)?;
    let watch = Watch::start(spec.brokers, spec.output, spec.partitions)?;
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (brokers, input, partitions, rate, producing) =
            (spec.brokers.to_owned(), spec.input.to_owned(), spec.partitions, spec.rate, Arc::clone(&producing));
        std::thread::spawn(move || produce(&brokers, &input, partitions, rate, &producing))
    };
    let mut processes: Vec<Process> = (0..spec.processes).map(|i| Process::start(spec, i)).collect::<anyhow::Result<_>>()?;
    let outcome = kill_and_time(spec, &watch, &mut processes);
    producing.store(false, Ordering::Relaxed);
    let expected = producer.join().expect("producer thread")?;
    let times = outcome?;
    watch.wait_for_count(expected.len(), SETTLE).context("the output never caught up with the input")?;
    for process in &mut processes {
        process.terminate();
    }
    let observed = measure::read_all(spec.brokers, spec.output, spec.partitions)?;
    let diff = reference::compare(&expected, &observed);
    let mut sorted = times.clone();
    sorted.sort_unstable();
    println!(
        "{{\"system\":\"weir-failover\",\"processes\":{},\"partitions\":{},\"kills\":{},\"p50_ms\":{},\"max_ms\":{},\"all_ms\":{:?},\"correct\":{},\"diff\":{}}}",
        spec.processes,
        spec.partitions,
        times.len(),
        sorted.get(sorted.len() / 2).copied().unwrap_or_default(),
        sorted.last().copied().unwrap_or_default(),
        times,
        diff.exact(),
        serde_json::to_string(&diff)?
    );
    if !diff.exact() {
        bail!("the output is not exactly the input: {diff:?}");
    }
    Ok(())
}

/// Kills each process in turn and times until its partitions show output again.
fn kill_and_time(spec: &Spec<'_>, watch: &Watch, processes: &mut [Process]) -> anyhow::Result<Vec<u64>> {
    for process in processes.iter() {
        process.wait_running(0, SETTLE)?;
    }
    watch.wait_flowing(now_ms(), SETTLE).context("the job never wrote every partition")?;
    let mut times = Vec::new();
    for kill in 0..spec.kills {
        let victim = &mut processes[kill % spec.processes];
        let owned = victim.owned();
        if owned.is_empty() {
            eprintln!("failover: kill {kill}: process {} owns nothing; skipped", victim.index);
            continue;
        }
        victim.kill();
        let killed = now_ms();
        watch.wait_resumed(&owned, killed, SETTLE).with_context(|| format!("kill {kill}: partitions {owned:?} never resumed"))?;
        let took = (now_ms() - killed) as u64;
        eprintln!("failover: kill {kill}: process {}'s partitions {owned:?} resumed after {took} ms", victim.index);
        times.push(took);
        let runs = victim.runs();
        victim.restart(spec)?;
        victim.wait_running(runs, SETTLE)?;
        watch.wait_flowing(now_ms(), SETTLE).with_context(|| format!("kill {kill}: the job did not settle"))?;
    }
    Ok(times)
}

/// Produces keyed records (each in its key's partition) at `rate` per second with event
/// time = the clock until `producing` is cleared; returns their digests, sorted.
fn produce(brokers: &str, topic: &str, partitions: i32, rate: u64, producing: &AtomicBool) -> anyhow::Result<Vec<u128>> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "1")
        .create()
        .with_context(|| format!("creating a producer on {brokers}"))?;
    let workload = Workload { records: u64::MAX, keys: 100_000, partitions, seed: 11, keyed: true };
    let started = Instant::now();
    let mut digests = Vec::new();
    for (sent, mut rec) in workload.records().enumerate() {
        if !producing.load(Ordering::Relaxed) {
            break;
        }
        let due = Duration::from_secs_f64(sent as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            topics::pause(&producer, wait);
        }
        rec.ts = now_ms();
        let (key, value) = (data::key(rec.key), data::value(&rec));
        let mut record = BaseRecord::to(topic).partition(rec.partition).key(key.as_str()).payload(value.as_str()).timestamp(rec.ts);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    record = returned;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        digests.push(reference::digest(key.as_bytes(), value.as_bytes()));
    }
    producer.flush(topics::WAIT).with_context(|| format!("flushing the last records to {topic}"))?;
    digests.sort_unstable();
    Ok(digests)
}

/// One `weir run` of the job.
struct Process {
    index: usize,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(spec: &Spec<'_>, index: usize) -> anyhow::Result<Process> {
        let log = spec.logs.join(format!("weir-{index}.log"));
        Ok(Process { index, child: spawn(spec.command, &log)?, log })
    }

    fn restart(&mut self, spec: &Spec<'_>) -> anyhow::Result<()> {
        self.child = spawn(spec.command, &self.log)?;
        Ok(())
    }

    /// SIGTERM (a final checkpoint, then it leaves the group); SIGKILL after 60 s.
    fn terminate(&mut self) {
        // SAFETY: kill(2) on a child this process spawned and has not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn runs(&self) -> usize {
        self.text().matches(RUNNING).count()
    }

    /// The partitions it last started running, from its log.
    fn owned(&self) -> Vec<i32> {
        let text = self.text();
        let Some(line) = text.lines().rev().find(|line| line.contains(RUNNING)) else { return Vec::new() };
        let Some(list) = line.split("partitions=[").nth(1).and_then(|rest| rest.split(']').next()) else { return Vec::new() };
        list.split(',').filter_map(|p| p.trim().parse().ok()).collect()
    }

    fn wait_running(&self, before: usize, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while self.runs() <= before {
            if Instant::now() > deadline {
                bail!("process {} did not run again within {within:?} (log {})", self.index, self.log.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

fn spawn(command: &[String], log: &Path) -> anyhow::Result<Child> {
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log).with_context(|| format!("opening {}", log.display()))?;
    let (program, args) = command.split_first().context("no command to run")?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {program}"))
}

/// Follows the output read_committed: per partition, the greatest event time seen and
/// how many records.
struct Watch {
    latest: Arc<Vec<AtomicI64>>,
    count: Arc<Mutex<usize>>,
}

impl Watch {
    fn start(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<Watch> {
        let consumer = topics::consumer(brokers, &format!("weir-bench-failover-{topic}"))?;
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            list.add_partition_offset(topic, p, Offset::Beginning)?;
        }
        consumer.assign(&list).with_context(|| format!("assigning {topic}"))?;
        let latest: Arc<Vec<AtomicI64>> = Arc::new((0..partitions).map(|_| AtomicI64::new(i64::MIN)).collect());
        let count = Arc::new(Mutex::new(0));
        let (seen, counted) = (Arc::clone(&latest), Arc::clone(&count));
        std::thread::spawn(move || follow(&consumer, &seen, &counted));
        Ok(Watch { latest, count })
    }

    /// Until every partition shows a record of event time after `since`.
    fn wait_flowing(&self, since: i64, within: Duration) -> anyhow::Result<()> {
        let all: Vec<i32> = (0..self.latest.len() as i32).collect();
        self.wait_resumed(&all, since, within)
    }

    /// Until each of `partitions` shows a record of event time after `since`.
    fn wait_resumed(&self, partitions: &[i32], since: i64, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while !partitions.iter().all(|&p| self.latest[p as usize].load(Ordering::Relaxed) > since) {
            if Instant::now() > deadline {
                bail!("no output after {since} within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    fn wait_for_count(&self, count: usize, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while *self.count.lock().expect("count") < count {
            if Instant::now() > deadline {
                bail!("{} of {count} records within {within:?}", self.count.lock().expect("count"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

fn follow(consumer: &BaseConsumer, latest: &[AtomicI64], count: &Mutex<usize>) {
    loop {
        // Errors (a partition's end, a connection hiccup) change nothing watched.
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            if let Timestamp::CreateTime(ts) | Timestamp::LogAppendTime(ts) = message.timestamp() {
                latest[message.partition() as usize].fetch_max(ts, Ordering::Relaxed);
            }
            *count.lock().expect("count") += 1;
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
