//! The changelog in packed segments and bases (DESIGN.md §5, "Changelog segments"),
//! through the real broker: bases written while the job is killed at every step of
//! them, a changelog the broker's cleaner has really compacted, bases left incomplete,
//! and records that are no weir record. The committed output equals the reference
//! every time.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

use support::clicks::{self, Clicks, Input, Pace, Producing};
use support::job::{self, CHANGELOG_PARTITIONS, JobDir, KEY_GROUPS};
use support::{Isolation, Tail};

const PARTITIONS: i32 = 4;
/// Windows long enough that most keys hold state through many checkpoints.
const WINDOW_MS: i64 = 60_000;
/// Enough keys that a group's segments outweigh the least base in a few checkpoints.
const KEYS: u64 = 8_000;
const CHUNK: usize = 2_500;

fn topics(job: &JobDir) {
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
}

type Produced = (Clicks, Vec<Input>);

/// Input in `chunks` chunks of `CHUNK` records 150 ms apart. Returns everything produced.
fn produce_paced(topic: &str, clicks: Clicks, chunks: usize) -> std::thread::JoinHandle<Produced> {
    let topic = topic.to_string();
    std::thread::spawn(move || paced(&topic, clicks, false, |produced| produced < chunks))
}

/// `produce_paced`'s chunks until `Producing::finish`, then the flush records.
fn produce_paced_until(topic: &str, clicks: Clicks) -> Producing<Produced> {
    let topic = topic.to_string();
    Producing::start(move |stop| paced(&topic, clicks, true, |produced| produced < MAX_CHUNKS && !stop.load(Ordering::Acquire)))
}

fn paced(topic: &str, mut clicks: Clicks, flush: bool, more: impl Fn(usize) -> bool) -> Produced {
    let pace = Pace { chunk: CHUNK, pause: Duration::from_millis(150), keyed: false };
    let mut all = clicks::produce_chunks_of(topic, &mut clicks, pace, more);
    if flush {
        let records = clicks.flush();
        support::produce(topic, &records);
        all.extend(records);
    }
    (clicks, all)
}

/// Bounds the paced input a test ends with `Producing::finish`: five minutes of pauses
/// alone, far more than a test waits.
const MAX_CHUNKS: usize = 2_000;
/// Bounds the steady input a test ends with `Producing::finish`, as `MAX_CHUNKS` does.
const MAX_STEADY: Duration = Duration::from_secs(300);

/// Input at a steady `per_second` records a second for `seconds`, then the flush
/// records, from one producer. Returns everything produced.
fn produce_steady(topic: &str, clicks: Clicks, per_second: usize, seconds: u64) -> std::thread::JoinHandle<Produced> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        let start = Instant::now();
        steady(&topic, clicks, per_second, || start.elapsed() < Duration::from_secs(seconds))
    })
}

/// `produce_steady`'s input until `Producing::finish`, then the flush records.
fn produce_steady_until(topic: &str, clicks: Clicks, per_second: usize) -> Producing<Produced> {
    let topic = topic.to_string();
    Producing::start(move |stop| {
        let start = Instant::now();
        steady(&topic, clicks, per_second, || start.elapsed() < MAX_STEADY && !stop.load(Ordering::Acquire))
    })
}

fn steady(topic: &str, mut clicks: Clicks, per_second: usize, more: impl Fn() -> bool) -> Produced {
    const TICK: Duration = Duration::from_millis(50);
    let producer = support::input_producer();
    let mut all = Vec::new();
    while more() {
        let chunk = clicks.take(per_second * TICK.as_millis() as usize / 1_000);
        support::send(&producer, topic, &chunk);
        all.extend(chunk);
        std::thread::sleep(TICK); // pacing, not synchronisation
    }
    let records = clicks.flush();
    support::send(&producer, topic, &records);
    all.extend(records);
    producer.flush(Duration::from_secs(30)).expect("flush");
    (clicks, all)
}

/// Runs the job until its committed output holds the reference of `input`, stops it
/// and compares the whole committed output. Returns the log.
fn finish_and_compare(job: &JobDir, input: &[Input], log: &std::path::Path) -> String {
    finish_and_compare_with(job, input, log, &[])
}

/// As `finish_and_compare`, the job run with `env`.
fn finish_and_compare_with(job: &JobDir, input: &[Input], log: &std::path::Path, env: &[(&str, &str)]) -> String {
    let expected = clicks::window_counts(input, WINDOW_MS);
    let mut child = job::start(&job.path(), log, env);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(180), &mut child);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(log);
    assert!(complete, "output incomplete after 180 s ({} of {}); log:\n{text}", tail.records.len(), expected.len());
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    text
}

/// The bases the job's committed checkpoints wrote, from its log.
fn bases_written(log: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains("checkpoint committed"))
        .filter_map(|line| line.split(" bases=").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The last checkpoint the log says was committed (0: none).
fn last_committed(log: &str) -> u64 {
    let committed = log.lines().filter(|line| line.contains("checkpoint committed"));
    committed.filter_map(|line| line.split(" checkpoint=").nth(1)?.split(' ').next()?.parse().ok()).max().unwrap_or(0)
}

/// Kills the job (run with `env`) at each of `kills`: how many checkpoints after the last
/// one committed, at which step, and whether the state_dir is deleted before that start.
fn kill_at_steps(job: &JobDir, log: &std::path::Path, kills: &[(u64, &str, bool)], env: &[(&str, &str)]) {
    for &(after, fault, lose_state) in kills {
        if lose_state && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let at = last_committed(&job::read_log(log)) + after;
        runs_until_killed(job, log, &format!("{fault}:{at}"), env);
    }
}

fn runs_until_killed(job: &JobDir, log: &std::path::Path, fault: &str, env: &[(&str, &str)]) {
    let env: Vec<(&str, &str)> = [("WEIR_FAULT", fault)].into_iter().chain(env.iter().copied()).collect();
    let mut child = job::start(&job.path(), log, &env);
    let status = job::wait(&mut child, Duration::from_secs(90))
        .unwrap_or_else(|| panic!("WEIR_FAULT={fault} did not fire within 90 s; log:\n{}", job::read_log(log)));
    assert_eq!(status.signal(), Some(libc::SIGKILL), "WEIR_FAULT={fault}: got {status}; log:\n{}", job::read_log(log));
}

#[test]
fn bases_survive_kills_in_them_and_at_every_step_of_their_checkpoints() {
    let job = job::job_dir("seg-kills");
    topics(&job);
    job.window_count(2, 150, WINDOW_MS as u64, "");
    // Input for as long as the kills below take: a checkpoint that writes a base needs it.
    let producer = produce_paced_until(&job.input, Clicks::new(31, PARTITIONS, KEYS));
    let log = job.dir.path().join("weir.log");
    // Killed in a base (its chunks sent, its end not), then at each step of a checkpoint
    // soon after, with the state_dir deleted before some restarts: bases are read back
    // from the changelog.
    let kills = [
        (1, "in-base", false),
        (1, "in-base", true),
        (2, "after-barrier", false),
        (2, "after-seal", true),
        (2, "after-commit", false),
        (3, "in-base", true),
        (4, "after-commit", true),
    ];
    kill_at_steps(&job, &log, &kills, &[]);
    let mut seed = support::crash_seed();
    for _ in 0..4 {
        if support::next_random(&mut seed).is_multiple_of(2) && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let mut child = job::start(&job.path(), &log, &[]);
        std::thread::sleep(Duration::from_millis(300 + support::next_random(&mut seed) % 2_000));
        job::kill(&mut child);
    }
    let (_, input) = producer.finish();
    let text = finish_and_compare(&job, &input, &log);
    assert!(text.contains("killing the process at InBase"), "no kill landed in a base:\n{text}");
    assert!(bases_written(&text) > 0, "no committed checkpoint wrote a base:\n{text}");
}

/// Early snapshot rounds (forced on: they pay only on input bigger than a test's): a
/// subtask writes its changes into the next checkpoint's open transaction before the
/// barrier. Random kills while every commit is slowed (early rounds fall due while a
/// checkpoint is in flight, when its transaction must not take them), then kills right
/// after such a round and after the commit of a checkpoint that had them, with the
/// state_dir deleted before some restarts: the output stays exact. The plugin's rounds
/// take both of its ways over a single open window: walking its tables, and reading the
/// slots it noted where they lie.
#[test]
fn early_snapshot_rounds_survive_kills_after_them() {
    const EARLY: (&str, &str) = ("WEIR_EARLY_ROUNDS", "always");
    const ROUNDS: (&str, &str) = ("RUST_LOG", "info,weir::plugin=debug");
    let job = job::job_dir("seg-early");
    topics(&job);
    // Early rounds a quarter or an eighth interval (100 or 50 ms) apart.
    job.window_count(2, 400, WINDOW_MS as u64, "");
    let producer = produce_steady_until(&job.input, Clicks::new(41, PARTITIONS, 200_000), 10_000);
    let log = job.dir.path().join("weir.log");
    let mut seed = support::crash_seed();
    for round in 0..4 {
        if round % 2 == 1 && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let mut child = job::start(&job.path(), &log, &[("WEIR_FAULT", "slow-commit:250"), EARLY, ROUNDS]);
        std::thread::sleep(Duration::from_millis(1_500 + support::next_random(&mut seed) % 2_000));
        job::kill(&mut child);
    }
    // Every checkpoint of a start but its first (100 ms in) has early rounds.
    let kills = [
        (1, "in-early-round", false),
        (2, "in-early-round", true),
        (3, "after-commit", false),
        (3, "after-changes-sealed", true),
        (3, "in-early-round", false),
        (4, "after-commit", true),
    ];
    kill_at_steps(&job, &log, &kills, &[EARLY, ROUNDS]);
    for _ in 0..3 {
        let mut child = job::start(&job.path(), &log, &[EARLY, ROUNDS]);
        std::thread::sleep(Duration::from_millis(300 + support::next_random(&mut seed) % 2_000));
        job::kill(&mut child);
    }
    let (_, input) = producer.finish();
    let text = finish_and_compare_with(&job, &input, &log, &[EARLY, ROUNDS]);
    assert!(text.contains("killing the process at InEarlyRound"), "no kill landed after an early round:\n{text}");
    let early: u64 = text
        .lines()
        .filter(|line| line.contains("checkpoint committed"))
        .filter_map(|line| line.split(" early_rounds=").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(early > 0, "no committed checkpoint had early rounds:\n{text}");
    assert!(text.contains("a snapshot round walks the only window"), "no round walked its window:\n{text}");
    // A round read noted slots before the last kill at a protocol step, so the state its
    // checkpoints committed was restored after a kill.
    let slots = text.find(" noted slots of the only window");
    let slots = slots.unwrap_or_else(|| panic!("no round read noted slots:\n{text}"));
    let last_kill = text.rfind("killing the process at").unwrap_or(0);
    assert!(slots < last_kill, "no kill at a protocol step came after a round read noted slots:\n{text}");
    assert!(bases_written(&text) > 0, "no committed checkpoint wrote a base:\n{text}");
}

#[test]
fn checkpoints_that_do_not_wait_for_a_slow_folder_survive_kills_and_stops() {
    // Every write of the folder takes 600 ms more, so committed checkpoints (every 150 ms)
    // join while it writes, and the coordinator keeps them until it can hand them over.
    const SLOW_FOLD: (&str, &str) = ("WEIR_FAULT", "slow-fold:600");
    const FOLDS: (&str, &str) = ("RUST_LOG", "info,weir::engine::folder=debug");
    let job = job::job_dir("seg-slow-fold");
    topics(&job);
    job.window_count(2, 150, WINDOW_MS as u64, "");
    let producer = produce_steady(&job.input, Clicks::new(43, PARTITIONS, 50_000), 5_000, 30);
    let log = job.dir.path().join("weir.log");
    let mut seed = support::crash_seed();
    for round in 0..6 {
        if round % 3 == 2 && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let mut child = job::start(&job.path(), &log, &[SLOW_FOLD, FOLDS]);
        std::thread::sleep(Duration::from_millis(1_000 + support::next_random(&mut seed) % 2_500));
        if round % 2 == 0 {
            job::kill(&mut child);
        } else {
            // A stop hands the kept checkpoints to the folder, which writes them first.
            let status = job::terminate(&mut child, Duration::from_secs(60));
            assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{}", job::read_log(&log));
        }
    }
    let (_, input) = producer.join().expect("producer thread");
    let text = finish_and_compare_with(&job, &input, &log, &[SLOW_FOLD, FOLDS]);
    let joined = text
        .lines()
        .filter(|line| line.contains("folded state changes"))
        .filter_map(|line| line.split(" checkpoints=").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .max();
    assert!(joined >= Some(3), "no fold held three checkpoints or more ({joined:?}):\n{text}");
}

/// A folder far slower than the checkpoints: the store is several checkpoints behind at
/// every barrier, so a base merges the changes the folder has not written over the
/// store's state. Bases come while the job runs (they once waited for the folder for
/// good), and the state read back from the changelog alone keeps the output exact.
#[test]
fn bases_come_behind_a_folder_slower_than_the_checkpoints() {
    // Each write of the folder takes 300 ms more; checkpoints come every 100 ms. A base
    // then merges several checkpoints the store does not hold yet over its state: each
    // restart below reads the state back from the changelog alone.
    const SLOW_FOLD: (&str, &str) = ("WEIR_FAULT", "slow-fold:300");
    let job = job::job_dir("seg-behind");
    topics(&job);
    job.window_count(2, 100, WINDOW_MS as u64, "");
    let producer = produce_steady(&job.input, Clicks::new(47, PARTITIONS, KEYS), 5_000, 20);
    let log = job.dir.path().join("weir.log");
    let mut seed = support::crash_seed();
    let mut child = job::start(&job.path(), &log, &[SLOW_FOLD]);
    std::thread::sleep(Duration::from_millis(5_000 + support::next_random(&mut seed) % 4_000));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let killed = job::read_log(&log).len();
    let mut child = job::start(&job.path(), &log, &[SLOW_FOLD]);
    let (_, input) = producer.join().expect("producer thread");
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{text}");
    // An attempt's first checkpoint may always write bases: the store holds all before it.
    let restarted = &text[killed..];
    let first = restarted.lines().find(|line| line.contains("checkpoint committed")).unwrap_or_default();
    let later = bases_written(restarted) - bases_written(first);
    assert!(later > 0, "no checkpoint but the first wrote a base behind the slow folder:\n{text}");
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    finish_and_compare_with(&job, &input, &log, &[SLOW_FOLD]);
}

/// The number of records a read of the whole topic returns.
fn records_in(topic: &str, partitions: i32) -> usize {
    support::read_to_end(topic, partitions, Isolation::ReadUncommitted).len()
}

#[test]
fn a_changelog_the_cleaner_compacted_restores_the_same_state() {
    let job = job::job_dir("seg-compacted");
    topics(&job);
    let changelog = format!("{}-changelog", job.name);
    // Cleaned as soon as the broker's cleaner looks: segments close after a second,
    // removals are dropped a second after they are cleaned.
    let cleaning = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "1000"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("delete.retention.ms", "1000"),
        ("min.compaction.lag.ms", "0"),
    ];
    support::create_topic_with(&changelog, CHANGELOG_PARTITIONS as i32, &cleaning);
    job.window_count(2, 150, WINDOW_MS as u64, "");
    let log = job.dir.path().join("weir.log");
    let mut input = Vec::new();
    let mut clicks = Clicks::new(37, PARTITIONS, KEYS);
    let deadline = Instant::now() + Duration::from_secs(150);
    // Phases of input, each drained; each phase's records close the log segments the
    // one before wrote, which the cleaner may then compact.
    for phase in 0.. {
        let (rest, chunk) = produce_paced(&job.input, clicks, 8).join().expect("producer thread");
        clicks = rest;
        input.extend(chunk);
        let mut child = job::start(&job.path(), &log, &[]);
        let ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, input.iter().filter(|r| r.0 == p).count() as i64)).collect();
        wait_committed(&job.name, &job.input, &ends, &mut child, &log);
        assert!(job::terminate(&mut child, Duration::from_secs(60)).success(), "log:\n{}", job::read_log(&log));
        let now = records_in(&changelog, CHANGELOG_PARTITIONS as i32);
        let written: u64 = job::read_log(&log)
            .lines()
            .filter_map(|line| line.split(" changelog_records=").nth(1)?.split(' ').next()?.parse::<u64>().ok())
            .sum();
        if phase > 0 && (now as u64) < written * 2 / 3 {
            eprintln!("after phase {phase}: {now} changelog records of {written} written");
            break;
        }
        assert!(Instant::now() < deadline, "the cleaner compacted nothing ({now} records of {written} written)");
        std::thread::sleep(Duration::from_secs(2));
    }
    // A new machine restores from what the cleaner left, and the job goes on.
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let flush = clicks.flush();
    support::produce(&job.input, &flush);
    input.extend(flush);
    let text = finish_and_compare(&job, &input, &log);
    assert!(bases_written(&text) > 0, "no committed checkpoint wrote a base:\n{text}");
}

/// Waits until the job's group has committed `ends` of the input.
fn wait_committed(group: &str, topic: &str, ends: &BTreeMap<i32, i64>, child: &mut std::process::Child, log: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let committed = support::try_committed_with_metadata(group, topic, PARTITIONS);
        let offsets = committed.as_ref().map(|c| c.iter().map(|&(p, o, _)| (p, o)).collect::<BTreeMap<_, _>>());
        if offsets.as_ref() == Ok(ends) {
            return;
        }
        assert!(job::wait(child, Duration::from_millis(200)).is_none(), "weir exited; log:\n{}", job::read_log(log));
        assert!(Instant::now() < deadline, "the input's end was not committed (last read: {offsets:?}); log:\n{}", job::read_log(log));
    }
}

/// A packed record's key of version 1, which held the base's id, built here from the
/// documented layout (`state::packed`).
fn packed_key(kind: u8, stage: u32, group: u32, base: u64, seq: u32) -> Vec<u8> {
    let mut key = b"\xff\xff\xff\xffP\x01".to_vec();
    key.push(kind);
    key.extend_from_slice(&stage.to_be_bytes());
    key.extend_from_slice(&group.to_be_bytes());
    key.extend_from_slice(&base.to_be_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// A packed record's key of version 2: the base's id is in the value.
fn packed_key_2(kind: u8, stage: u32, group: u32, seq: u32) -> Vec<u8> {
    let mut key = b"\xff\xff\xff\xffP\x02".to_vec();
    key.push(kind);
    key.extend_from_slice(&stage.to_be_bytes());
    key.extend_from_slice(&group.to_be_bytes());
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// A version 2 value: the version, base `base`, then `body` (a version 1 value's after its version).
fn packed_value_2(base: u64, body: &[u8]) -> Vec<u8> {
    let mut value = vec![2];
    value.extend_from_slice(&base.to_le_bytes());
    value.extend_from_slice(body);
    value
}

/// A packed value of `entries`, each a key and a value.
fn packed_entries(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut value = vec![1];
    for (key, state) in entries {
        value.push(key.len() as u8);
        value.push(state.len() as u8 + 1);
        value.extend_from_slice(key);
        value.extend_from_slice(state);
    }
    value
}

fn produce_raw(topic: &str, records: &[(i32, Vec<u8>, Vec<u8>)]) {
    let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", support::brokers()).create().expect("producer");
    for (partition, key, value) in records {
        producer.send(BaseRecord::to(topic).partition(*partition).key(key).payload(value)).map_err(|(e, _)| e).expect("produce");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// The changelog partition that holds key group `group`'s records.
fn partition_of(group: u32) -> i32 {
    (group % CHANGELOG_PARTITIONS) as i32
}

/// A key of key group `group` that the input uses.
fn key_in_group(input: &[Input], group: u32) -> Vec<u8> {
    let found = input.iter().map(|r| &r.1).find(|key| clicks::java_partition(key, KEY_GROUPS as i32) as u32 == group);
    found.expect("a key in every group").clone()
}

#[test]
fn incomplete_bases_are_never_used() {
    let job = job::job_dir("seg-incomplete");
    topics(&job);
    job.window_count(2, 150, WINDOW_MS as u64, "");
    let log = job.dir.path().join("weir.log");
    let (clicks, mut input) = produce_paced(&job.input, Clicks::new(41, PARTITIONS, KEYS), 8).join().unwrap();
    let mut child = job::start(&job.path(), &log, &[]);
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, input.iter().filter(|r| r.0 == p).count() as i64)).collect();
    wait_committed(&job.name, &job.input, &ends, &mut child, &log);
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
    // Bases whose writer died, as a reader could meet them: chunks without an end, an
    // end without its second chunk. Applied, they would empty a group or make it garbage.
    let changelog = format!("{}-changelog", job.name);
    // Groups past the changelog's partition count, which share partitions with others.
    let (group, other) = (11, 13);
    let key = key_in_group(&input, group);
    let garbage = packed_entries(&[(&key, b"not the plugin's state")]);
    // The same in version 2's records, in two other groups.
    let (group_2, other_2) = (9, 30);
    let garbage_2 = packed_value_2(44, &packed_entries(&[(&key_in_group(&input, group_2), b"not the plugin's state")])[1..]);
    produce_raw(
        &changelog,
        &[
            (partition_of(group), packed_key(b'b', 0, group, 42, 0), garbage.clone()),
            (partition_of(other), packed_key(b'b', 0, other, 43, 0), packed_entries(&[])),
            // An end saying two chunks (n=1, chunks=2, entries=0, bytes=0).
            (partition_of(other), packed_key(b'e', 0, other, 43, 0), vec![1, 1, 2, 0, 0]),
            (partition_of(group_2), packed_key_2(b'b', 0, group_2, 0), garbage_2),
            (partition_of(other_2), packed_key_2(b'b', 0, other_2, 0), packed_value_2(45, &[])),
            (partition_of(other_2), packed_key_2(b'e', 0, other_2, 0), packed_value_2(45, &[1, 2, 0, 0])),
        ],
    );
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let (clicks, more) = produce_paced(&job.input, clicks, 4).join().unwrap();
    input.extend(more);
    input.extend(clicks.flush());
    support::produce(&job.input, &clicks.flush());
    let text = finish_and_compare(&job, &input, &log);
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no rebuild:\n{text}");
}

/// A window-count job (`prefix`) that has read and committed 8 000 records, stopped.
/// Returns it, its log and its input.
fn committed_and_stopped(prefix: &str, seed: u64) -> (JobDir, std::path::PathBuf, Vec<Input>) {
    let job = job::job_dir(prefix);
    topics(&job);
    job.window_count(2, 150, WINDOW_MS as u64, "");
    let log = job.dir.path().join("weir.log");
    let (_, input) = produce_paced(&job.input, Clicks::new(seed, PARTITIONS, 2_000), 4).join().unwrap();
    let mut child = job::start(&job.path(), &log, &[]);
    let ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, input.iter().filter(|r| r.0 == p).count() as i64)).collect();
    wait_committed(&job.name, &job.input, &ends, &mut child, &log);
    // A stop folds every committed checkpoint into the store.
    assert!(job::terminate(&mut child, Duration::from_secs(60)).success());
    (job, log, input)
}

#[test]
fn a_malformed_segment_stops_the_restore_naming_topic_partition_and_offset() {
    let (job, log, _) = committed_and_stopped("seg-malformed", 43);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    restore_stops_on_a_malformed_segment(&job, &log);
}

#[test]
fn a_segment_of_an_operator_the_job_lacks_stops_the_restore() {
    let (job, log, input) = committed_and_stopped("seg-stage", 45);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    // Well formed, of key group 22, but of a sixth operator: the job has one.
    let segment = (packed_key(b's', 5, 22, 0, 9_998), packed_entries(&[(&key_in_group(&input, 22), b"state")]));
    let (at, text) = restore_stops_on(&job, &log, segment);
    let wanted = format!("holds state of operator 5 (counting from 0) {at}, and job `{}` has 1 operator: the job file lost operators", job.name);
    assert!(text.contains(&wanted), "no error naming the record and what to do ({wanted}):\n{text}");
}

/// A state_dir one checkpoint behind Kafka's committed offsets (killed after a commit,
/// before its fold) is brought up by replaying the changelog's tail; a malformed record
/// there stops the restore at once: a replay of the whole topic would empty the store
/// only to fail on the same record.
#[test]
fn a_malformed_segment_in_the_tail_stops_the_restore_without_a_replay_of_the_whole_topic() {
    let (job, log, _) = committed_and_stopped("seg-malformed-tail", 47);
    // The next start's second checkpoint is committed, and not folded.
    kill_at_steps(&job, &log, &[(2, "after-commit", false)], &[]);
    let text = restore_stops_on_a_malformed_segment(&job, &log);
    let restart = &text[text.rfind("killing the process at AfterCommit").expect("the kill is logged")..];
    assert!(restart.contains("replaying keyed state from the changelog's tail"), "no replay of the tail:\n{text}");
    let whole = ["rebuilding from the whole topic", "replaying keyed state from the whole changelog"];
    assert!(whole.iter().all(|line| !restart.contains(line)), "a replay of the whole topic after the tail's failed:\n{text}");
}

/// Writes a segment whose one entry claims a key of 100 bytes in a value of 4 at the end
/// of key group 22's partition, then starts the job: as `restore_stops_on`.
fn restore_stops_on_a_malformed_segment(job: &JobDir, log: &std::path::Path) -> String {
    let (at, text) = restore_stops_on(job, log, (packed_key(b's', 0, 22, 0, 9_999), vec![1, 100, 1, b'k']));
    let changelog = format!("{}-changelog", job.name);
    let wanted = format!("the changelog topic `{changelog}` holds a record weir did not write for job `{}` {at}", job.name);
    assert!(text.contains(&wanted), "no error naming topic, partition and offset ({wanted}):\n{text}");
    assert!(text.contains("runs past the value"), "the error says what is wrong:\n{text}");
    text
}

/// Writes `record`, a packed record of key group 22 (its key and value), at the end of
/// that group's partition of the changelog, then starts the job: it must stop, nothing
/// committed and nothing written. Returns where the record is (`at partition P offset
/// O`) and the log.
fn restore_stops_on(job: &JobDir, log: &std::path::Path, (key, value): (Vec<u8>, Vec<u8>)) -> (String, String) {
    let changelog = format!("{}-changelog", job.name);
    let partition = partition_of(22);
    let offset = support::end_offset(&changelog, partition);
    produce_raw(&changelog, &[(partition, key, value)]);
    let committed = support::committed_offsets(&job.name, &job.input, PARTITIONS);
    let output_before = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    let mut child = job::start(&job.path(), log, &[]);
    let status = job::wait(&mut child, Duration::from_secs(90)).expect("weir stops on a malformed changelog");
    let text = job::read_log(log);
    assert!(!status.success(), "weir exited {status}; log:\n{text}");
    assert_eq!(support::committed_offsets(&job.name, &job.input, PARTITIONS), committed, "nothing committed");
    let output = clicks::as_multiset(&support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted));
    assert!(output == output_before, "nothing written");
    (format!("at partition {partition} offset {offset}"), text)
}
