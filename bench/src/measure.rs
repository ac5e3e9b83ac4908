//! One measured run: starts a system's command, waits (bounded) until its complete output
//! is visible to a read_committed consumer, samples its process tree meanwhile, stops it,
//! then reads the whole output and compares it exactly with the reference.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::data::Workload;
use crate::procs::{self, Usage};
use crate::reference::{self, Diff, Kind};
use crate::topics;

pub(crate) struct Spec<'a> {
    pub(crate) system: &'a str,
    pub(crate) kind: Kind,
    pub(crate) brokers: &'a str,
    pub(crate) input: &'a str,
    pub(crate) output: &'a str,
    /// The system's consumer group: for `copy`, completion = its committed offsets reach
    /// the input's end (they commit in the same transaction as the output).
    pub(crate) group: &'a str,
    pub(crate) workload: Workload,
    pub(crate) timeout: Duration,
    pub(crate) log: &'a std::path::Path,
    pub(crate) command: &'a [String],
}

#[derive(Debug, serde::Serialize)]
pub(crate) struct Outcome {
    pub(crate) system: String,
    pub(crate) kind: Kind,
    pub(crate) records: u64,
    pub(crate) seconds: f64,
    pub(crate) records_per_s: f64,
    pub(crate) cpu_s: f64,
    pub(crate) records_per_cpu_s: f64,
    pub(crate) peak_rss_mib: f64,
    pub(crate) correct: bool,
    pub(crate) diff: Diff,
    pub(crate) note: String,
}

pub(crate) fn run(spec: &Spec<'_>) -> anyhow::Result<Outcome> {
    let expected = reference::expected(spec.kind, &spec.workload);
    topics::create(spec.brokers, spec.output, spec.workload.partitions)?;
    let watcher = topics::consumer(spec.brokers, &format!("weir-bench-watch-{}", spec.output))?;
    assign_all(&watcher, spec.output, spec.workload.partitions)?;
    let input_end = topics::end_offsets(&watcher, spec.input, spec.workload.partitions)?;

    let started = Instant::now();
    let mut child = start_group(spec.command, spec.log)?;
    let pid = child.id() as i32;
    let stop = Arc::new(AtomicBool::new(false));
    let usage = Arc::new(Mutex::new(Usage::default()));
    let sampler = {
        let (stop, usage) = (stop.clone(), usage.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = procs::sample(pid);
                let mut u = usage.lock().expect("usage");
                u.cpu_s = u.cpu_s.max(now.cpu_s);
                u.rss_bytes = u.rss_bytes.max(now.rss_bytes);
                u.hwm_bytes = u.hwm_bytes.max(now.hwm_bytes);
                drop(u);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let waited = wait_complete(spec, &watcher, &mut child, &input_end, expected.len(), started);
    let seconds = started.elapsed().as_secs_f64();
    let final_sample = procs::sample(pid);
    stop.store(true, Ordering::Relaxed);
    sampler.join().ok();
    stop_group(&mut child, pid);
    let mut u = *usage.lock().expect("usage");
    u.cpu_s = u.cpu_s.max(final_sample.cpu_s);
    u.hwm_bytes = u.hwm_bytes.max(final_sample.hwm_bytes);
    let note = match &waited {
        Ok(()) => String::new(),
        Err(e) => format!("{e:#}"),
    };

    let observed = read_all(spec.brokers, spec.output, spec.workload.partitions)?;
    let diff = reference::compare(&expected, &observed);
    let correct = waited.is_ok() && diff.exact();
    let records = spec.workload.records;
    Ok(Outcome {
        system: spec.system.to_owned(),
        kind: spec.kind,
        records,
        seconds,
        records_per_s: records as f64 / seconds,
        cpu_s: u.cpu_s,
        records_per_cpu_s: records as f64 / u.cpu_s.max(1e-9),
        peak_rss_mib: u.hwm_bytes.max(u.rss_bytes) as f64 / (1024.0 * 1024.0),
        correct,
        diff,
        note,
    })
}

fn assign_all(consumer: &BaseConsumer, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&list).with_context(|| format!("assigning {topic}"))
}

/// Until the whole output is visible: `expected` records counted (window-count, a running
/// total) or the system's committed offsets at the input's end (copy).
fn wait_complete(
    spec: &Spec<'_>,
    watcher: &BaseConsumer,
    child: &mut Child,
    input_end: &[i64],
    expected: usize,
    started: Instant,
) -> anyhow::Result<()> {
    let mut seen = 0usize;
    let mut errors = 0u32;
    let group = match spec.kind {
        Kind::Copy => Some(topics::consumer(spec.brokers, spec.group)?),
        Kind::WindowCount | Kind::RunningTotal => None,
    };
    loop {
        if started.elapsed() > spec.timeout {
            bail!("timed out after {:?} with {seen} of {expected} output records visible", spec.timeout);
        }
        if let Some(status) = child.try_wait()? {
            bail!("{} exited early ({status}); see {}", spec.system, spec.log.display());
        }
        match spec.kind {
            Kind::WindowCount | Kind::RunningTotal => {
                if let Some(message) = watcher.poll(Duration::from_millis(50)) {
                    match message {
                        Ok(_) => seen += 1,
                        Err(KafkaError::PartitionEOF(_)) => {}
                        Err(e) => transient(&mut errors, &e, spec.output)?,
                    }
                }
                if seen >= expected {
                    return Ok(());
                }
            }
            Kind::Copy => {
                std::thread::sleep(Duration::from_millis(50));
                let group = group.as_ref().expect("a group consumer for copy");
                // A fresh broker answers NotCoordinator until the group's coordinator is up:
                // ask again; the timeout above bounds it.
                match topics::committed(group, spec.input, spec.workload.partitions) {
                    Ok(committed) if committed == input_end => return Ok(()),
                    Ok(_) => {}
                    Err(e) => eprintln!("weir-bench: {e:#} (asking again)"),
                }
            }
        }
    }
}

/// Starts `command` in a process group of its own (so `stop_group` reaches whatever it
/// starts), its stdout and stderr going to `log`.
pub(crate) fn start_group(command: &[String], log: &std::path::Path) -> anyhow::Result<Child> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let (program, args) = command.split_first().context("no command to run")?;
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {program}"))
}

/// SIGTERM to the process group, SIGKILL after 20 s.
pub(crate) fn stop_group(child: &mut Child, pid: i32) {
    // SAFETY: kill(2) on the process group we created.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // Stragglers in the group (e.g. a wrapper's children).
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    child.wait().ok();
}

/// Every committed record of `topic`, as sorted digests: reads until each partition
/// reports its end and nothing more arrives for a second.
pub(crate) fn read_all(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<Vec<u128>> {
    let consumer = topics::consumer(brokers, &format!("weir-bench-check-{topic}"))?;
    assign_all(&consumer, topic, partitions)?;
    let mut at_end = vec![false; partitions as usize];
    let mut out = Vec::new();
    let mut quiet_since = Instant::now();
    let mut errors = 0u32;
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                at_end[m.partition() as usize] = false;
                out.push(reference::digest(m.key().unwrap_or_default(), m.payload().unwrap_or_default()));
                quiet_since = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => at_end[p as usize] = true,
            Some(Err(e)) => transient(&mut errors, &e, topic)?,
            None => {}
        }
        if at_end.iter().all(|&e| e) && quiet_since.elapsed() > Duration::from_secs(1) {
            out.sort_unstable();
            return Ok(out);
        }
    }
    bail!("reading {topic} did not reach its end within 600 s")
}

/// librdkafka reports connection hiccups (e.g. an idle connection the broker closed) as
/// consumption errors and then recovers by itself: tolerate a bounded number of them.
pub(crate) fn transient(errors: &mut u32, e: &KafkaError, topic: &str) -> anyhow::Result<()> {
    const MAX_ERRORS: u32 = 100;
    *errors += 1;
    eprintln!("weir-bench: reading {topic}: {e} (retrying)");
    if *errors > MAX_ERRORS {
        bail!("reading {topic}: {e}, and {MAX_ERRORS} errors before it");
    }
    Ok(())
}
