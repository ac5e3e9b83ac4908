//! Jobs as graphs (DESIGN.md §8) through the real broker: several sources, an operator
//! reading two of them, one source read by two readers, several sinks. Every sink's
//! committed output equals its reference exactly, with the process SIGKILLed at random
//! moments, its state_dir deleted before half the restarts.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use support::clicks::{self, Clicks};
use support::graph::Topic;
use support::job::{self, JobDir, StateDir};
use support::{Isolation, Tail};

const WINDOW_MS: i64 = 1000;


/// Clicks in paced chunks on `topic` while the job is killed, then its flush records.
fn produce(topic: &Topic, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    clicks::produce_paced(&topic.name, seed, topic.partitions, chunks, false)
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

/// Sources `a` and `b`, and `both`, a window count over the two of them.
fn count_of_both(a: &Topic, b: &Topic) -> String {
    format!(
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
"#,
        brokers = support::brokers(),
        a = a.name,
        b = b.name,
        plugin = support::plugin("window-count").display(),
    )
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
            r#"{both}
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
            both = count_of_both(&a, &b),
            brokers = support::brokers(),
            plugin = plugin.display(),
            counts = counts.name,
            counts_a = counts_a.name,
            copy_b = copy_b.name,
        ),
    );
    let seed = support::crash_seed();
    let (from_a, from_b) = (produce(&a, seed, 16), produce(&b, seed ^ 0x5555, 12));
    let log = job.dir.path().join("weir.log");
    job::kill_at_random_moments(&job, &log, 8, seed, StateDir::Lost);
    let (input_a, input_b) = (from_a.join().expect("producer a"), from_b.join().expect("producer b"));
    // Once more after a commit, then without the state_dir: the restart rebuilds it.
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", job::count_in_log(&log, "checkpoint committed"), Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");

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
{both}
[[sinks]]
name = "counts"
topic = "{out}"
from = ["both"]

[producer]
brokers = "{brokers}"
"#,
            both = count_of_both(a, b),
            brokers = support::brokers(),
            out = out.name,
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

/// The country of a user of the first table, and after the update of phase 2.
fn country(user: u64, updated: bool) -> &'static str {
    if updated && user < 50 {
        return "br";
    }
    ["de", "fr", "us", "jp"][(user % 4) as usize]
}

fn user_of(key: &[u8]) -> u64 {
    std::str::from_utf8(key).ok().and_then(|k| k.strip_prefix("user-")).and_then(|n| n.parse().ok()).expect("a user key")
}

/// Rows of the users table, one per user, in the partition a Java producer puts them.
fn profiles(users: impl Iterator<Item = u64>, updated: bool, partitions: i32) -> Vec<clicks::Input> {
    users
        .map(|user| {
            let key = format!("user-{user}").into_bytes();
            let value = format!("{{\"country\":\"{}\",\"tier\":{}}}", country(user, updated), user % 3).into_bytes();
            (clicks::java_partition(&key, partitions), key, value, clicks::START_MS)
        })
        .collect()
}

/// Whether the job's committed offsets have reached the end of every partition of `topic`
/// (a broker error: not yet).
fn committed_to_end(group: &str, topic: &Topic) -> bool {
    let Ok(committed) = support::try_committed_with_metadata(group, &topic.name, topic.partitions) else {
        return false;
    };
    committed.len() == topic.partitions as usize
        && committed.iter().all(|&(partition, at, _)| at >= support::end_offset(&topic.name, partition))
}

/// Runs the job unkilled until its committed offsets reach the end of `topic`, then kills it:
/// everything read so far is decided.
fn run_until_committed(job: &JobDir, log: &Path, topic: &Topic) {
    let mut child = job::start(&job.path(), log, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !committed_to_end(&job.name, topic) {
        assert!(Instant::now() < deadline, "{} not committed to its end in 120 s; log:\n{}", topic.name, job::read_log(log));
        assert!(matches!(child.try_wait(), Ok(None)), "weir exited; log:\n{}", job::read_log(log));
        std::thread::sleep(Duration::from_millis(200));
    }
    job::kill(&mut child);
}

/// Clicks ⋈ a users table, then a window count per country through a second operator
/// keyed by country: SIGKILLed at random moments, the state_dir deleted before half
/// the restarts, the parallelism changed at every restart (1 to 3), with table updates
/// during the run (new users whose earlier clicks came out unmatched, and users who
/// moved): the counts are exactly the reference. Each phase's input is decided (its
/// offsets committed) before the next phase's is produced, so the reference knows which
/// profile each click met.
#[test]
fn an_enrichment_then_a_count_per_country_is_exact_under_sigkill_lost_state_and_rescaling() {
    let job = job::job_dir("enrich-count");
    let users = Topic::table(&job, "users", 2);
    let (clicks_topic, counts) = (Topic::new(&job, "clicks", 4), Topic::new(&job, "counts", 2));
    let write = |parallelism: u32| {
        job.write(
            parallelism,
            100,
            &format!(
                r#"
[[sources]]
name = "clicks"
brokers = "{brokers}"
topic = "{clicks}"

[[sources]]
name = "users"
brokers = "{brokers}"
topic = "{users}"
table = true

[[operators]]
name = "enrich"
plugin = "{enrich}"
key_by = true
inputs = ["clicks", "users"]
[operators.config]
fields = "country"
key_field = "country"

[[operators]]
name = "per_country"
plugin = "{count}"
key_by = true
inputs = ["enrich"]
[operators.config]
window_ms = "{WINDOW_MS}"

[[sinks]]
name = "counts"
topic = "{counts}"
from = ["per_country"]

[producer]
brokers = "{brokers}"
"#,
                brokers = support::brokers(),
                clicks = clicks_topic.name,
                users = users.name,
                counts = counts.name,
                enrich = support::plugin("enrich").display(),
                count = support::plugin("window-count").display(),
            ),
        )
    };
    let log = job.dir.path().join("weir.log");
    let seed = support::crash_seed();
    let mut random = seed;
    let restart = |kills: usize, random: &mut u64| {
        for _ in 0..kills {
            write(1 + (support::next_random(random) % 3) as u32);
            if support::next_random(random).is_multiple_of(2) && job.state_dir().exists() {
                std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
            }
            let delay = Duration::from_millis(support::next_random(random) % 2500);
            let mut child = job::start(&job.path(), &log, &[]);
            if let Some(status) = job::wait(&mut child, delay) {
                panic!("weir exited by itself with {status}; log:\n{}", job::read_log(&log));
            }
            job::kill(&mut child);
        }
    };
    // The key of each click the reference expects: its user's country then, or none.
    let mut expected_keyed: Vec<clicks::Input> = Vec::new();
    let mut generator = Clicks::new(seed, clicks_topic.partitions, 500);

    // Phase 1: users 0..400 in the table before the first start; clicks of users 0..500.
    support::produce(&users.name, &profiles(0..400, false, users.partitions));
    let first = generator.take_keyed(15_000);
    support::produce(&clicks_topic.name, &first);
    restart(4, &mut random);
    write(2);
    run_until_committed(&job, &log, &clicks_topic);
    for (partition, key, value, time) in &first {
        let user = user_of(key);
        let country = if user < 400 { country(user, false) } else { "" };
        expected_keyed.push((*partition, country.as_bytes().to_vec(), value.clone(), *time));
    }

    // Phase 2: users 400..500 arrive, users 0..50 move to another country.
    support::produce(&users.name, &profiles((400..500).chain(0..50), true, users.partitions));
    restart(3, &mut random);
    write(3);
    run_until_committed(&job, &log, &users);

    // Phase 3: more clicks, now all matched with the updated table, then the flush.
    let second = generator.take_keyed(15_000);
    let flush = generator.flush_keyed();
    let producer = {
        let (topic, second, flush) = (clicks_topic.name.clone(), second.clone(), flush.clone());
        std::thread::spawn(move || {
            for chunk in second.chunks(2_500) {
                support::produce(&topic, chunk);
                std::thread::sleep(Duration::from_millis(300));
            }
            support::produce(&topic, &flush);
        })
    };
    restart(5, &mut random);
    producer.join().expect("producer");
    for (partition, key, value, time) in second.iter().chain(&flush) {
        let country = if *time < clicks::FLUSH_MS { country(user_of(key), true) } else { "" };
        expected_keyed.push((*partition, country.as_bytes().to_vec(), value.clone(), *time));
    }

    write(2);
    let mut child = job::start(&job.path(), &log, &[]);
    await_exact(&counts, &clicks::window_counts(&expected_keyed, WINDOW_MS), &mut child, &log);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(&log));
    let text = job::read_log(&log);
    assert!(text.contains("table read to its end"), "no table bootstrap was logged:\n{text}");
    let unmatched = expected_keyed.iter().filter(|r| r.1.is_empty() && r.3 < clicks::FLUSH_MS).count();
    assert!(unmatched > 1000, "only {unmatched} clicks were expected unmatched");
    eprintln!("enrich-count: {} clicks ({unmatched} unmatched in phase 1), 12 kills with rescaling", first.len() + second.len());
}

/// A record of a table topic: a key, and a value or none (a tombstone).
type Row = support::Nullable;

/// Rows of 600 keys on `topic`'s partitions, each key's updates in order: rows of kind
/// `a` or `b`, empty values, and tombstones.
fn produce_rows(topic: &Topic) -> Vec<Row> {
    use rdkafka::producer::{BaseRecord, Producer};
    let producer = support::input_producer();
    let mut rows = Vec::new();
    for n in 0..3_000u32 {
        let key = format!("row-{:04}", n % 600).into_bytes();
        let value = match n % 5 {
            0 | 3 => Some(format!(r#"{{"kind":"a","n":{n}}}"#).into_bytes()),
            1 => Some(format!(r#"{{"kind":"b","n":{n}}}"#).into_bytes()),
            2 => None,
            _ => Some(Vec::new()),
        };
        let partition = (n % 600) as i32 % topic.partitions;
        let mut record = BaseRecord::<[u8], [u8]>::to(&topic.name).partition(partition).key(&key).timestamp(1_000 + i64::from(n));
        if let Some(value) = &value {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(error, _)| error).expect("send a row");
        rows.push((Some(key), value));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    rows
}

/// The multiset of `rows`.
fn row_counts<'a>(rows: impl IntoIterator<Item = &'a Row>) -> BTreeMap<&'a Row, usize> {
    let mut counts = BTreeMap::new();
    for row in rows {
        *counts.entry(row).or_default() += 1;
    }
    counts
}

/// Waits until `topic` holds `expected` committed records, and compares them with it.
fn await_rows(topic: &Topic, expected: &[Row], child: &mut std::process::Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let read = support::read_nullable(&topic.name, topic.partitions, Isolation::ReadCommitted);
        if read.len() >= expected.len() {
            assert_eq!(row_counts(&read), row_counts(expected), "{}: the committed records differ", topic.name);
            return;
        }
        assert!(job::wait(child, Duration::from_millis(500)).is_none(), "weir exited; log:\n{}", job::read_log(log));
        assert!(Instant::now() < deadline, "{}: {} of {} records after 120 s; log:\n{}", topic.name, read.len(), expected.len(), job::read_log(log));
    }
}

/// A table topic's tombstones (null values) stay tombstones, apart from empty values:
/// through a sink that reads the source, and through an operator that takes them
/// marked (`tombstones = true`) and emits them; an operator without that key reads
/// them as empty values.
#[test]
fn tombstones_pass_through_a_filter_and_to_a_sink_as_tombstones() {
    let job = job::job_dir("tombstones");
    let rows = Topic::table(&job, "rows", 2);
    let (kept, plain, copy) = (Topic::new(&job, "kept", 2), Topic::new(&job, "plain", 2), Topic::new(&job, "copy", 2));
    let plugin = support::plugin("py-filter");
    job.write(
        2,
        200,
        &format!(
            r#"
[[sources]]
name = "rows"
brokers = "{brokers}"
topic = "{rows}"

[[operators]]
name = "marking"
plugin = "{plugin}"
inputs = ["rows"]
tombstones = true
[operators.config]
field = "kind"
equals = "a"

[[operators]]
name = "unmarking"
plugin = "{plugin}"
inputs = ["rows"]
[operators.config]
field = "kind"
equals = "a"

[[sinks]]
name = "kept"
topic = "{kept}"
from = ["marking"]

[[sinks]]
name = "plain"
topic = "{plain}"
from = ["unmarking"]

[[sinks]]
name = "copy"
topic = "{copy}"
from = ["rows"]

[producer]
brokers = "{brokers}"
"#,
            brokers = support::brokers(),
            rows = rows.name,
            plugin = plugin.display(),
            kept = kept.name,
            plain = plain.name,
            copy = copy.name,
        ),
    );
    let input = produce_rows(&rows);
    let of_kind_a = |row: &&Row| row.1.as_ref().is_some_and(|value| value.starts_with(br#"{"kind":"a""#));
    let expected_kept: Vec<Row> = input.iter().filter(|row| of_kind_a(row) || row.1.is_none()).cloned().collect();
    let expected_plain: Vec<Row> = input.iter().filter(of_kind_a).cloned().collect();
    assert!(input.iter().any(|row| row.1.is_none()) && input.iter().any(|row| row.1.as_ref().is_some_and(Vec::is_empty)));
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    await_rows(&copy, &input, &mut child, &log);
    await_rows(&kept, &expected_kept, &mut child, &log);
    await_rows(&plain, &expected_plain, &mut child, &log);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(&log));
    let text = job::read_log(&log);
    let told = text.lines().filter(|line| line.contains("is handed records without a value (tombstones) as empty values")).collect::<Vec<_>>();
    assert!(!told.is_empty() && told.iter().all(|line| line.contains("`unmarking[")), "the unmarked operator is not told, or another is:\n{text}");
}
