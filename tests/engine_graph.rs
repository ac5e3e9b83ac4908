//! Jobs as graphs (DESIGN.md §8) through the real broker: several sources, an operator
//! reading two of them, one source read by two readers, several sinks. Every sink's
//! committed output equals its reference exactly, with the process SIGKILLed at random
//! moments, its state_dir deleted before half the restarts.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use support::clicks;
use support::job::{self, JobDir};
use support::{Isolation, Tail};

const WINDOW_MS: i64 = 1000;

/// A topic of the test and its partition count.
struct Topic {
    name: String,
    partitions: i32,
}

impl Topic {
    fn new(job: &JobDir, role: &str, partitions: i32) -> Topic {
        let topic = Topic { name: support::unique_name(&format!("{}-{role}", job.name)), partitions };
        support::create_topic(&topic.name, partitions);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !support::topic_exists(&topic.name) {
            assert!(Instant::now() < deadline, "topic {} not listed 30 s after its creation", topic.name);
            std::thread::sleep(Duration::from_millis(50));
        }
        topic
    }
}

/// Clicks in paced chunks on `topic` while the job is killed, then its flush records.
fn produce(topic: &Topic, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    clicks::produce_paced(&topic.name, seed, topic.partitions, chunks, false)
}

/// SIGKILLs fresh runs at random moments up to 2.5 s after spawn; before a random half
/// of the restarts the state_dir is deleted.
fn kill_at_random_moments(job: &JobDir, log: &Path, kills: usize, seed: u64) {
    let mut state = seed;
    for _ in 0..kills {
        if support::next_random(&mut state).is_multiple_of(2) && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let delay = Duration::from_millis(support::next_random(&mut state) % 2500);
        let mut child = job::start(&job.path(), log, &[]);
        let started = Instant::now();
        if let Some(status) = job::wait(&mut child, delay) {
            panic!("weir exited by itself with {status} after {:?}; log:\n{}", started.elapsed(), job::read_log(log));
        }
        job::kill(&mut child);
    }
}

/// Reads `topic` until it holds as many records as `expected` counts (or the job
/// exits), then compares the whole committed topic with it.
fn await_exact(topic: &Topic, expected: &BTreeMap<(Vec<u8>, Vec<u8>), usize>, child: &mut std::process::Child, log: &Path) {
    let mut tail = Tail::new(&topic.name, topic.partitions);
    let want = expected.values().sum();
    let complete = tail.until_while(want, Duration::from_secs(180), child);
    assert!(complete, "{}: {} of {want} records after 180 s; log:\n{}", topic.name, tail.records.len(), job::read_log(log));
    let committed = support::read_to_end(&topic.name, topic.partitions, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    assert!(&actual == expected, "{}: {}", topic.name, clicks::difference(expected, &actual));
}

/// Each (key, value) of `records` as many times as it occurs.
fn copies(records: &[clicks::Input]) -> BTreeMap<(Vec<u8>, Vec<u8>), usize> {
    let mut counts = BTreeMap::new();
    for (_, key, value, _) in records {
        *counts.entry((key.clone(), value.clone())).or_default() += 1;
    }
    counts
}

#[test]
fn a_graph_of_two_sources_and_three_sinks_commits_each_reference_under_sigkill() {
    let job = job::job_dir("graph");
    let (a, b) = (Topic::new(&job, "a", 4), Topic::new(&job, "b", 2));
    let (counts, counts_a, copy_b) = (Topic::new(&job, "counts", 4), Topic::new(&job, "counts-a", 2), Topic::new(&job, "copy-b", 2));
    let plugin = support::plugin("window-count");
    // `both` counts windows over a and b together (its watermark is the least of the
    // two); `only_a` reads a alone; `copy_b` takes b's records straight to a sink.
    job.write(
        2,
        100,
        &format!(
            r#"
[[sources]]
name = "a"
brokers = "{brokers}"
topic = "{a}"

[[sources]]
name = "b"
brokers = "{brokers}"
topic = "{b}"

[[operators]]
name = "both"
plugin = "{plugin}"
key_by = true
inputs = ["a", "b"]
[operators.config]
window_ms = "{WINDOW_MS}"

[[operators]]
name = "only_a"
plugin = "{plugin}"
key_by = true
inputs = ["a"]
[operators.config]
window_ms = "{WINDOW_MS}"

[[sinks]]
name = "counts"
topic = "{counts}"
from = ["both"]

[[sinks]]
name = "counts_a"
topic = "{counts_a}"
from = ["only_a"]

[[sinks]]
name = "copy_b"
topic = "{copy_b}"
from = ["b"]

[producer]
brokers = "{brokers}"
"#,
            brokers = support::brokers(),
            a = a.name,
            b = b.name,
            plugin = plugin.display(),
            counts = counts.name,
            counts_a = counts_a.name,
            copy_b = copy_b.name,
        ),
    );
    let seed = support::crash_seed();
    let (from_a, from_b) = (produce(&a, seed, 16), produce(&b, seed ^ 0x5555, 12));
    let log = job.dir.path().join("weir.log");
    kill_at_random_moments(&job, &log, 8, seed);
    let (input_a, input_b) = (from_a.join().expect("producer a"), from_b.join().expect("producer b"));

    let mut child = job::start(&job.path(), &log, &[]);
    let mut both: Vec<clicks::Input> = input_a.clone();
    both.extend(input_b.iter().cloned());
    await_exact(&copy_b, &copies(&input_b), &mut child, &log);
    await_exact(&counts_a, &clicks::window_counts(&input_a, WINDOW_MS), &mut child, &log);
    await_exact(&counts, &clicks::window_counts(&both, WINDOW_MS), &mut child, &log);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(&log));
    let text = job::read_log(&log);
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no restart rebuilt its state:\n{text}");
    eprintln!("graph: {} + {} input records, 3 sinks exact after 8 kills", input_a.len(), input_b.len());
}

/// A window count over two co-partitioned sources, `scale_out = true`.
fn scaled_out_join(job: &JobDir, a: &Topic, b: &Topic, out: &Topic) {
    job.write(
        1,
        200,
        &format!(
            r#"scale_out = true

[[sources]]
name = "a"
brokers = "{brokers}"
topic = "{a}"

[[sources]]
name = "b"
brokers = "{brokers}"
topic = "{b}"

[[operators]]
name = "both"
plugin = "{plugin}"
key_by = true
inputs = ["a", "b"]
[operators.config]
window_ms = "{WINDOW_MS}"

[[sinks]]
name = "counts"
topic = "{out}"
from = ["both"]

[producer]
brokers = "{brokers}"
"#,
            brokers = support::brokers(),
            a = a.name,
            b = b.name,
            out = out.name,
            plugin = support::plugin("window-count").display(),
        ),
    );
}

/// Two processes of a job that reads two co-partitioned topics, one of them killed at
/// random and restarted while input arrives on both: the output is exact. The group
/// assigns the first topic's partitions, and each process owns the same partition
/// numbers of the second.
#[test]
fn two_processes_of_a_two_source_job_killed_at_random_keep_the_output_exact() {
    let job = job::job_dir("graph-so");
    let (a, b, out) = (Topic::new(&job, "a", 4), Topic::new(&job, "b", 4), Topic::new(&job, "out", 2));
    scaled_out_join(&job, &a, &b, &out);
    let seed = support::crash_seed();
    let from_a = clicks::produce_paced(&a.name, seed, a.partitions, 20, true);
    let from_b = clicks::produce_paced(&b.name, seed ^ 0x3333, b.partitions, 20, true);
    let logs: Vec<_> = (0..2).map(|i| job.dir.path().join(format!("weir-{i}.log"))).collect();
    let mut children: Vec<_> = logs.iter().map(|log| job::start(&job.path(), log, &[])).collect();
    let mut random = seed;
    let mut kills = 0;
    while !(from_a.is_finished() && from_b.is_finished()) {
        std::thread::sleep(Duration::from_millis(1000 + support::next_random(&mut random) % 2500));
        let victim = (support::next_random(&mut random) % 2) as usize;
        job::kill(&mut children[victim]);
        children[victim] = job::start(&job.path(), &logs[victim], &[]);
        kills += 1;
    }
    let mut input = from_a.join().expect("producer a");
    input.extend(from_b.join().expect("producer b"));
    let expected = clicks::window_counts(&input, WINDOW_MS);
    let mut tail = Tail::new(&out.name, out.partitions);
    let text = || logs.iter().map(|log| job::read_log(log)).collect::<Vec<_>>().join("\n--- next process ---\n");
    assert!(tail.until(expected.len(), Duration::from_secs(180)), "{} of {} after 180 s; logs:\n{}", tail.records.len(), expected.len(), text());
    for child in &mut children {
        let status = job::terminate(child, Duration::from_secs(60));
        assert!(status.success(), "a process exited with {status} after SIGTERM; logs:\n{}", text());
    }
    let actual = clicks::as_multiset(&support::read_to_end(&out.name, out.partitions, Isolation::ReadCommitted));
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    assert!(kills >= 3, "only {kills} kills while the input arrived");
}

#[test]
fn sources_of_other_partition_counts_cannot_scale_out() {
    let job = job::job_dir("graph-so-bad");
    let (a, b, out) = (Topic::new(&job, "a", 4), Topic::new(&job, "b", 3), Topic::new(&job, "out", 2));
    scaled_out_join(&job, &a, &b, &out);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(60)).expect("weir exits");
    let text = job::read_log(&log);
    assert!(!status.success(), "ran sources that are not co-partitioned:\n{text}");
    assert!(text.contains("co-partitioned") && text.contains(&b.name) && text.contains("3 partitions"), "unclear error:\n{text}");
}
