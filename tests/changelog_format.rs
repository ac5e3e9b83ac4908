//! A changelog written in the format of one Kafka record per changed key (weir up to
//! commit e069c63) is still read: `tests/fixtures/changelog-per-key.json` holds such a
//! changelog as that binary committed it, with the job's committed offsets and output,
//! after it counted the first part of a click stream. The job continues from it on a
//! new machine (no state_dir), under kills, writes its checkpoints in packed segments,
//! and its whole committed output equals the reference.
//!
//! `write_fixture` made the fixture with that binary; run it again only to replace it.

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
use support::job::{self, JobDir, KEY_GROUPS};
use support::{Isolation, Tail};

const JOB: &str = "fixture-per-key";
const INPUT: &str = "fixture-per-key-input";
const OUTPUT: &str = "fixture-per-key-output";
const PARTITIONS: i32 = 4;
const WINDOW_MS: u64 = 5_000;
const SEED: u64 = 24;
const KEYS: u64 = 400;
/// Records counted before the fixture was taken, and after.
const FIRST: usize = 6_000;
const SECOND: usize = 6_000;

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

fn fixture_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/changelog-per-key.json")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}

/// The click stream of the fixture: its first part, then the rest and the flush.
fn input() -> (Vec<Input>, Vec<Input>) {
    let mut clicks = Clicks::new(SEED, PARTITIONS, KEYS);
    let first = clicks.take(FIRST);
    let mut second = clicks.take(SECOND);
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
    job
}

/// The committed offsets of the job's group, with their metadata.
fn committed_offsets() -> Vec<(i32, i64, String)> {
    support::committed_with_metadata(JOB, INPUT, PARTITIONS)
}

#[test]
#[ignore = "writes the fixture with the binary under test; run once per format change"]
fn write_fixture() {
    let job = fixture_job();
    start_clean(&job);
    let (first, _) = input();
    support::produce(&job.input, &first);
    let log = job.dir.path().join("weir.log");
    let mut child = job::start(&job.path(), &log, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let wanted: BTreeMap<i32, i64> =
        (0..PARTITIONS).map(|p| (p, first.iter().filter(|(partition, ..)| *partition == p).count() as i64)).collect();
    while committed_offsets().iter().map(|&(p, o, _)| (p, o)).collect::<BTreeMap<_, _>>() != wanted {
        assert!(Instant::now() < deadline, "the first part was not committed; log:\n{}", job::read_log(&log));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
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
        .map(|(partition, key, value)| (partition, hex(&key.unwrap_or_default()), hex(&value)))
        .collect();
    let written_by = String::from_utf8(job::weir().arg("--version").output().expect("weir --version").stdout).unwrap();
    let fixture = Fixture { written_by: written_by.trim().into(), offsets: committed_offsets(), changelog, output };
    std::fs::write(fixture_path(), serde_json::to_string_pretty(&fixture).unwrap()).expect("writing the fixture");
}

/// Puts the fixture's changelog, committed offsets and first input back on the broker, as
/// the old binary left them.
fn restore_fixture(job: &JobDir, fixture: &Fixture, first: &[Input]) {
    start_clean(job);
    support::produce(&job.input, first);
    let changelog = format!("{JOB}-changelog");
    support::create_topic_with(&changelog, KEY_GROUPS as i32, &[("cleanup.policy", "compact")]);
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
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(fixture_path()).expect("the fixture")).expect("fixture JSON");
    let job = fixture_job();
    let (first, second) = input();
    restore_fixture(&job, &fixture, &first);
    let ends: Vec<i64> = (0..PARTITIONS).map(|p| first.iter().filter(|r| r.0 == p).count() as i64).collect();
    for &(partition, offset, _) in &fixture.offsets {
        assert_eq!(offset, ends[partition as usize], "the fixture's offsets are the first part's ends");
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

    let records = support::read_to_end_with_headers(&format!("{JOB}-changelog"), KEY_GROUPS as i32, Isolation::ReadCommitted);
    let packed = records.iter().filter(|(_, key, ..)| key.as_deref().is_some_and(weir::state::packed::is_packed_key)).count();
    assert!(packed > 0, "the job went on writing one record per key");
}
