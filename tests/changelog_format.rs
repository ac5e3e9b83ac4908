//! Changelogs that older weirs wrote are still read. Each fixture holds one as that
//! binary committed it, with the job's committed offsets and output, after it counted
//! the first part of a click stream:
//! - `tests/fixtures/changelog-per-key.json`: one Kafka record per changed key (weir up
//!   to commit e069c63);
//! - `tests/fixtures/changelog-packed-1.json`: packed records of version 1, whose keys
//!   held the base's id (weir from 38ef51d to d19ab2b), written by continuing the first
//!   fixture: records of one key each, their removals, bases and segments.
//!
//! The job continues from each on a new machine (no state_dir), under kills, writes its
//! checkpoints in today's packed records, and its whole committed output equals the
//! reference. `write_fixture` and `write_packed_1_fixture` made the fixtures with those
//! binaries (`WEIR_BIN`); run them again only to replace them.

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use support::clicks::{self, Clicks, Input};
use support::job::{self, JobDir};
use support::{Isolation, Tail};

const JOB: &str = "fixture-per-key";
const INPUT: &str = "fixture-per-key-input";
const OUTPUT: &str = "fixture-per-key-output";
const PARTITIONS: i32 = 4;
const WINDOW_MS: u64 = 5_000;
const SEED: u64 = 24;
/// The fixtures' key groups, and so their changelogs' partitions: one group each, as
/// weir placed them before changelogs of a few partitions.
const KEY_GROUPS: u32 = 8;
const KEYS: u64 = 400;
/// Records counted before the fixture was taken, and after.
const FIRST: usize = 6_000;
const SECOND: usize = 6_000;

/// A changelog format an older weir wrote: its fixture's file, and how many records of
/// the click stream it had counted.
struct Format {
    file: &'static str,
    counted: usize,
}

const PER_KEY: Format = Format { file: "changelog-per-key.json", counted: FIRST };
const PACKED_1: Format = Format { file: "changelog-packed-1.json", counted: FIRST + SECOND / 2 };

/// The fixtures share the job's name, which their changelogs and offsets hold, and so
/// its topics and group: one test at a time uses them.
static TOPICS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A changelog record: (partition, key, value or none for a removal, headers).
type FixtureRecord = (i32, String, Option<String>, Vec<(String, String)>);

/// What the fixture holds, every byte as hex.
#[derive(Serialize, Deserialize)]
struct Fixture {
    /// The binary that wrote it.
    written_by: String,
    /// Per input partition: the committed offset and its metadata.
    offsets: Vec<(i32, i64, String)>,
    /// Every committed changelog record in offset order per partition:
    /// (partition, key, value or none for a removal, headers).
    changelog: Vec<FixtureRecord>,
    /// The committed output: (partition, key, value).
    output: Vec<(i32, String, String)>,
}

fn fixture_path(format: &Format) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(format.file)
}

fn read_fixture(format: &Format) -> Fixture {
    serde_json::from_str(&std::fs::read_to_string(fixture_path(format)).expect("the fixture")).expect("fixture JSON")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

/// The click stream: the part `format`'s fixture had counted, then the rest and the flush.
fn input(format: &Format) -> (Vec<Input>, Vec<Input>) {
    let mut clicks = Clicks::new(SEED, PARTITIONS, KEYS);
    let first = clicks.take(format.counted);
    let mut second = clicks.take(FIRST + SECOND - format.counted);
    second.extend(clicks.flush());
    (first, second)
}

/// The fixture's topics and group from an earlier run are gone.
fn start_clean(job: &JobDir) {
    for topic in [INPUT.to_string(), OUTPUT.to_string(), format!("{JOB}-changelog")] {
        if support::topic_exists(&topic) {
            support::delete_topic(&topic);
        }
    }
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    delete_group(JOB);
}

fn delete_group(group: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    let admin: AdminClient<_> = ClientConfig::new().set("bootstrap.servers", support::brokers()).create().expect("admin");
    let _ = support::block_on(admin.delete_groups(&[group], &AdminOptions::new()));
}

fn fixture_job() -> JobDir {
    let job = JobDir {
        dir: tempfile::tempdir().expect("temporary directory"),
        name: JOB.into(),
        input: INPUT.into(),
        output: OUTPUT.into(),
    };
    job.window_count(2, 200, WINDOW_MS, "");
    job.set_key_groups(KEY_GROUPS);
    job
}

/// The committed offsets of the job's group, with their metadata.
fn committed_offsets() -> Vec<(i32, i64, String)> {
    support::committed_with_metadata(JOB, INPUT, PARTITIONS)
}

/// Waits until the job's group has committed the ends of `input`.
fn wait_counted(input: &[Input], log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let wanted: BTreeMap<i32, i64> =
        (0..PARTITIONS).map(|p| (p, input.iter().filter(|(partition, ..)| *partition == p).count() as i64)).collect();
    loop {
        let committed = support::try_committed_with_metadata(JOB, INPUT, PARTITIONS);
        let offsets = committed.map(|c| c.into_iter().map(|(p, o, _)| (p, o)).collect::<BTreeMap<_, _>>());
        if offsets.as_ref() == Ok(&wanted) {
            return;
        }
        assert!(Instant::now() < deadline, "the input was not committed (last read: {offsets:?}); log:\n{}", job::read_log(log));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Writes `format`'s fixture from what the stopped job left on the broker, after the
/// output of the fixture it continued (`earlier`).
fn save_fixture(format: &Format, earlier: Vec<(i32, String, String)>) {
    let changelog = support::read_to_end_with_headers(&format!("{JOB}-changelog"), KEY_GROUPS as i32, Isolation::ReadCommitted)
        .into_iter()
        .map(|(partition, key, value, headers)| {
            // Every value weir writes starts with a format tag: an empty one is a removal.
            let value = (!value.is_empty()).then(|| hex(&value));
            (partition, hex(&key.expect("changelog records have keys")), value, headers.iter().map(|(k, v)| (k.clone(), hex(v))).collect())
        })
        .collect();
    let output = support::read_to_end(OUTPUT, PARTITIONS, Isolation::ReadCommitted)
        .into_iter()
        .map(|(partition, key, value)| (partition, hex(&key.unwrap_or_default()), hex(&value)));
    let output = earlier.into_iter().chain(output).collect();
    let written_by = String::from_utf8(job::weir().arg("--version").output().expect("weir --version").stdout).unwrap();
    let fixture = Fixture { written_by: written_by.trim().into(), offsets: committed_offsets(), changelog, output };
    std::fs::write(fixture_path(format), serde_json::to_string_pretty(&fixture).unwrap()).expect("writing the fixture");
}

#[test]
#[ignore = "writes the fixture with the binary under test; run once per format change"]
fn write_fixture() {
    let _topics = TOPICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let job = fixture_job();
    start_clean(&job);
    let (first, _) = input(&PER_KEY);
    support::produce(&job.input, &first);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    wait_counted(&first, &log);
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
    save_fixture(&PER_KEY, Vec::new());
}

#[test]
#[ignore = "writes the fixture with the binary under test (weir up to d19ab2b); run once per format change"]
fn write_packed_1_fixture() {
    let _topics = TOPICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let job = fixture_job();
    let (first, _) = input(&PER_KEY);
    let per_key = read_fixture(&PER_KEY);
    restore_fixture(&job, &per_key, &first);
    let (counted, _) = input(&PACKED_1);
    // In three parts, each counted before the next: the first checkpoint writes every
    // group's base (it holds records of one key each), the later ones segments after it.
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let part = (counted.len() - first.len()).div_ceil(3);
    for start in (first.len()..counted.len()).step_by(part) {
        let end = (start + part).min(counted.len());
        support::produce(&job.input, &counted[start..end]);
        wait_counted(&counted[..end], &log);
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
    save_fixture(&PACKED_1, per_key.output);
    let ends = read_fixture(&PACKED_1).changelog.iter().filter(|(_, key, value, _)| value.is_some() && is_base_end(&Some(unhex(key)), 1)).count();
    assert!(ends > 0, "the binary wrote no version 1 base; log:\n{}", job::read_log(&log));
}

/// Puts the fixture's changelog, committed offsets and the input it counted back on the
/// broker, as the old binary left them.
fn restore_fixture(job: &JobDir, fixture: &Fixture, counted: &[Input]) {
    start_clean(job);
    support::produce(&job.input, counted);
    let changelog = format!("{JOB}-changelog");
    // Cleaned as soon as the broker's cleaner looks, so the old records and the new are
    // compacted together while the job runs.
    let cleaning = [("cleanup.policy", "compact"), ("segment.ms", "1000"), ("min.cleanable.dirty.ratio", "0.01"), ("min.compaction.lag.ms", "0")];
    support::create_topic_with(&changelog, KEY_GROUPS as i32, &cleaning);
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", support::brokers()).set("enable.idempotence", "true").create().expect("producer");
    for (partition, key, value, headers) in &fixture.changelog {
        let key = unhex(key);
        let value = value.as_deref().map(unhex);
        let headers = headers.iter().fold(OwnedHeaders::new(), |all, (k, v)| all.insert(Header { key: k, value: Some(&unhex(v)) }));
        let mut record = BaseRecord::<[u8], [u8]>::to(&changelog).partition(*partition).key(&key).headers(headers);
        if let Some(value) = &value {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(e, _)| e).expect("producing the changelog");
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::brokers())
        .set("group.id", JOB)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut offsets = TopicPartitionList::new();
    for (partition, offset, metadata) in &fixture.offsets {
        offsets.add_partition_offset(INPUT, *partition, Offset::Offset(*offset)).unwrap();
        offsets.find_partition(INPUT, *partition).unwrap().set_metadata(metadata);
    }
    consumer.commit(&offsets, rdkafka::consumer::CommitMode::Sync).expect("committing the fixture's offsets");
}

#[test]
fn a_changelog_of_one_record_per_key_is_read_and_continued_in_segments() {
    let _topics = TOPICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let records = continue_under_kills(&PER_KEY);
    let packed = records.iter().filter(|(_, key, ..)| key.as_deref().is_some_and(weir::state::packed::is_packed_key)).count();
    assert!(packed > 0, "the job went on writing one record per key");
}

#[test]
fn a_changelog_of_version_1_packed_records_is_read_and_continued_in_todays() {
    let _topics = TOPICS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let fixture = read_fixture(&PACKED_1);
    let old: Vec<Vec<u8>> = fixture.changelog.iter().map(|(_, key, ..)| unhex(key)).filter(|key| packed_version(key) == Some(1)).collect();
    assert!(old.iter().any(|key| key[6] == b'e'), "the fixture holds version 1 bases");
    let records = continue_under_kills(&PACKED_1);
    let version_2_base = |group: i32| records.iter().any(|(p, key, value, _)| *p == group && is_base_end(key, 2) && !value.is_empty());
    assert!((0..KEY_GROUPS as i32).any(version_2_base), "the job wrote no base in today's format");
    // Once a group has a base in today's format, every version 1 record of it is removed
    // (the job has one keyed stage, so a partition's records are one group's).
    for (at, (partition, key, value, _)) in records.iter().enumerate() {
        let key = key.as_deref().unwrap_or_default();
        if packed_version(key) != Some(1) || value.is_empty() || !version_2_base(*partition) {
            continue;
        }
        let removed = records[at + 1..].iter().any(|(p, later, v, _)| p == partition && later.as_deref() == Some(key) && v.is_empty());
        assert!(removed, "a version 1 record of key group {partition} outlived the group's new base");
    }
}

/// The version of a packed record's key (`state::packed`), if it is one.
fn packed_version(key: &[u8]) -> Option<u8> {
    weir::state::packed::is_packed_key(key).then(|| key[5])
}

fn is_base_end(key: &Option<Vec<u8>>, version: u8) -> bool {
    key.as_deref().is_some_and(|key| packed_version(key) == Some(version) && key[6] == b'e')
}

/// Puts `format`'s fixture back, runs the job on the rest of the input under kills, half
/// of them followed by the state_dir's loss, and checks the whole output; returns the
/// changelog's committed records then.
fn continue_under_kills(format: &Format) -> Vec<support::ReadWithHeaders> {
    let fixture = read_fixture(format);
    let job = fixture_job();
    let (first, second) = input(format);
    restore_fixture(&job, &fixture, &first);
    let ends: Vec<i64> = (0..PARTITIONS).map(|p| first.iter().filter(|r| r.0 == p).count() as i64).collect();
    for &(partition, offset, _) in &fixture.offsets {
        assert_eq!(offset, ends[partition as usize], "the fixture's offsets are the counted part's ends");
    }
    support::produce(&job.input, &second);

    let all: Vec<Input> = first.iter().chain(&second).cloned().collect();
    let expected = clicks::window_counts(&all, WINDOW_MS as i64);
    let earlier: Vec<support::Read> =
        fixture.output.iter().map(|(p, k, v)| (*p, Some(unhex(k)), unhex(v))).collect();
    let wanted = expected.values().sum::<usize>() - earlier.len();
    let log = job.dir.path().join("weir.log");
    // The first start restores from the changelog alone; later ones after kills, half of
    // them without the state_dir again.
    let mut seed = support::crash_seed();
    let mut tail = Tail::new(&job.output, PARTITIONS);
    for kill in 0..4 {
        let mut child = job::start(&job.path(), &log, &[]);
        std::thread::sleep(Duration::from_millis(600 + support::next_random(&mut seed) % 1_500));
        job::kill(&mut child);
        if kill % 2 == 1 {
            let _ = std::fs::remove_dir_all(job.state_dir());
        }
    }
    let running = job::count_in_log(&log, "recovered; running");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "recovered; running", running, Duration::from_secs(60));
    let complete = tail.until_while(wanted, Duration::from_secs(180), &mut child);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(complete && status.success(), "output incomplete ({} of {wanted}) or exit {status}; log:\n{text}", tail.records.len());
    let mut committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    committed.extend(earlier);
    let actual = clicks::as_multiset(&committed);
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "the first start read the old changelog:\n{text}");
    support::read_to_end_with_headers(&format!("{JOB}-changelog"), KEY_GROUPS as i32, Isolation::ReadCommitted)
}
