//! The dedup example (plugins/dedup: `KeyedMap` ids, `Timers` that forget them) through
//! its real Wasm component: restored into a fresh instance every few batches it emits
//! what it emits straight through, and a checkpoint holds only the ids that changed;
//! `weir check` saves and restores its state; and a real job of it, SIGKILLed at random
//! with the state_dir deleted before half the restarts, commits exactly the reference.

use crate::operator_common as common;
use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Image, apply, changes, config, load, plugin_path, records, restore};
use support::clicks::java_partition;
use support::job::{self, StateDir};
use support::{Isolation, Tail};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};

const HORIZON_MS: i64 = 5_000;
const PARTITIONS: i32 = 4;

/// One input record: (partition, key, value, timestamp).
type Input = (i32, Vec<u8>, Vec<u8>, i64);

/// Records of `keys` keys, each in its key's partition (Kafka's default partitioner),
/// event time non-decreasing per partition: a key's id is one of 8, so a third or more are
/// duplicates within the horizon; every 50th record has no id. Each value is unique
/// (`seq`), so the output is a set.
fn input(seed: u64, records: usize, keys: u64, clocks: &mut [i64; PARTITIONS as usize]) -> Vec<Input> {
    let mut state = seed | 1;
    let mut next = move || support::next_random(&mut state);
    (0..records)
        .map(|_| {
            let key = format!("user-{}", next() % keys);
            let partition = java_partition(key.as_bytes(), PARTITIONS);
            let clock = &mut clocks[partition as usize];
            *clock += (next() % 40) as i64;
            let seq = next();
            let value = match next() % 50 {
                0 => format!("{{\"seq\":{seq}}}"),
                _ => format!("{{\"id\":\"order-{}\",\"seq\":{seq}}}", next() % 8),
            };
            (partition, key.into_bytes(), value.into_bytes(), *clock)
        })
        .collect()
}

/// What dedup passes on, computed without it: per key in arrival order, a record is
/// dropped when its id was remembered at a time less than the horizon away; otherwise
/// passed on, and remembered unless it is older than the remembered one.
fn reference(input: &[Input]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut seen: BTreeMap<(Vec<u8>, String), i64> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, key, value, time) in input {
        let json: serde_json::Value = serde_json::from_slice(value).unwrap();
        if let Some(id) = json.get("id").and_then(|id| id.as_str()) {
            match seen.get(&(key.clone(), id.to_owned())) {
                Some(first) if (time - first).abs() < HORIZON_MS => continue,
                Some(first) if time < first => {}
                _ => {
                    seen.insert((key.clone(), id.to_owned()), *time);
                }
            }
        }
        out.push((key.clone(), value.clone()));
    }
    out
}

fn new_instance(label: &str) -> OperatorInstance {
    let plugin = load("dedup");
    let horizon = HORIZON_MS.to_string();
    OperatorInstance::new(&plugin, Limits::default(), config(&[("horizon_ms", &horizon)]), label.to_owned())
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The input cut into batches of up to 200 records, each followed by the watermark
/// its records allow (the least partition clock so far).
fn steps(input: &[Input]) -> Vec<(Batch, i64)> {
    let mut clocks = [i64::MIN; PARTITIONS as usize];
    input
        .chunks(200)
        .map(|part| {
            let mut batch = Batch::new();
            for (partition, key, value, time) in part {
                batch.push(Some(key), value, *time, &[]);
                clocks[*partition as usize] = *time;
            }
            (batch, *clocks.iter().min().unwrap())
        })
        .collect()
}

#[test]
fn dedup_restored_every_few_batches_emits_what_it_emits_straight_through() {
    let mut clocks = [support::clicks::START_MS; PARTITIONS as usize];
    let input = input(41, 6_000, 40, &mut clocks);
    let steps = steps(&input);
    let run = |instance: &mut OperatorInstance, (batch, watermark): &(Batch, i64), out: &mut Vec<_>| {
        out.extend(records(&instance.process(batch).unwrap_or_else(|err| panic!("{err}"))));
        out.extend(records(&instance.on_watermark(*watermark).unwrap_or_else(|err| panic!("{err}"))));
    };

    let mut straight = Vec::new();
    let mut instance = new_instance("straight");
    for step in &steps {
        run(&mut instance, step, &mut straight);
    }
    let expected: Vec<_> = reference(&input)
        .into_iter()
        .map(|(key, value)| (String::from_utf8(key).unwrap(), String::from_utf8(value).unwrap()))
        .collect();
    let passed: Vec<_> = straight.iter().map(|(key, value, _)| (key.clone().unwrap(), value.clone())).collect();
    assert_eq!(passed, expected, "dedup straight through against the reference");
    assert!(passed.len() * 4 < input.len() * 3, "{} of {} passed: too few duplicates", passed.len(), input.len());

    // A checkpoint after every batch; every third one replaced by a fresh instance.
    let mut resumed = Vec::new();
    let mut instance = new_instance("resumed-0");
    let mut image = Image::new();
    for (at, step) in steps.iter().enumerate() {
        run(&mut instance, step, &mut resumed);
        apply(&mut image, &changes(&mut instance));
        if at % 3 == 2 {
            instance = new_instance(&format!("resumed-{at}"));
            restore(&mut instance, &image, step.1);
            assert!(changes(&mut instance).is_empty(), "restored entries are not changes");
        }
    }
    assert_eq!(straight, resumed, "dedup's output with and without restores");
}

#[test]
fn a_dedup_checkpoint_holds_the_ids_that_changed() {
    let mut instance = new_instance("cost");
    let ids: Vec<String> = (0..60).map(|i| format!("{{\"id\":\"order-{i}\"}}")).collect();
    let mut batch = Batch::new();
    for (i, value) in ids.iter().enumerate() {
        batch.push(Some(b"user-1"), value.as_bytes(), 1_000 + i as i64, &[]);
    }
    assert_eq!(instance.process(&batch).unwrap().len(), 60);
    assert_eq!(changes(&mut instance).len(), 120, "60 ids and their 60 timers");

    // A duplicate changes nothing; a new id is one id and one timer.
    let mut batch = Batch::new();
    batch.push(Some(b"user-1"), ids[7].as_bytes(), 2_000, &[]);
    batch.push(Some(b"user-1"), br#"{"id":"order-new"}"#, 2_000, &[]);
    assert_eq!(instance.process(&batch).unwrap().len(), 1);
    assert_eq!(changes(&mut instance).len(), 2);
    // The watermark passes the first id's time + horizon: its id and its timer go.
    instance.on_watermark(1_000 + HORIZON_MS).unwrap();
    let gone = changes(&mut instance);
    assert_eq!(gone.len(), 2);
    assert!(gone.iter().all(|(_, value)| value.is_none()), "both removals");
}

#[test]
fn weir_check_saves_and_restores_dedup_state() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("dedup.json").display().to_string();
    let check = |args: &[&str]| {
        let out = support::job::weir()
            .arg("check")
            .arg(plugin_path("dedup"))
            .args(args)
            .env("WEIR_CACHE_DIR", common::cache_dir())
            .env("RUST_LOG", "error")
            .output()
            .expect("run weir check");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "weir check failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let first = check(&[
        "--config", "horizon_ms=500",
        "--record", r#"a={"id":"x","n":1}@100"#,
        "--record", r#"a={"id":"x","n":2}@150"#,
        "--record", r#"b={"id":"x","n":3}@120"#,
        "--record", r#"a={"id":"y","n":4}@200"#,
        "--watermark", "300", "--save-snapshot", &saved,
    ]);
    for line in [
        r#"process emitted: key "a" value "{\"id\":\"x\",\"n\":1}" @100"#,
        r#"process emitted: key "b" value "{\"id\":\"x\",\"n\":3}" @120"#,
        r#"process emitted: key "a" value "{\"id\":\"y\",\"n\":4}" @200"#,
        // Three ids and their three timers, each an entry of its own.
        "saved:    6 entries at watermark 300",
    ] {
        assert!(first.contains(line), "no `{line}` in\n{first}");
    }
    assert!(!first.contains(r#"\"n\":2"#), "a duplicate passed:\n{first}");
    // Restored: a's x is still remembered at 400; y is forgotten by 700 and passes at 800.
    let second = check(&[
        "--config", "horizon_ms=500",
        "--restore", &saved,
        "--record", r#"a={"id":"x","n":5}@400"#,
        "--record", r#"a={"id":"y","n":6}@800"#,
    ]);
    assert!(second.contains("restore:  6 entries at watermark 300"), "{second}");
    assert!(second.contains(r#"process emitted: key "a" value "{\"id\":\"y\",\"n\":6}" @800"#), "{second}");
    assert!(!second.contains(r#"\"n\":5"#), "a remembered id passed after the restore:\n{second}");
}

/// The input arriving in `chunks` chunks of 2,500 records 300 ms apart; returns it all.
fn produce_paced(topic: &str, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<Input>> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        let mut clocks = [support::clicks::START_MS; PARTITIONS as usize];
        let mut all = Vec::new();
        for chunk in 0..chunks {
            let part = input(seed.wrapping_add(chunk as u64), 2_500, 200, &mut clocks);
            support::produce(&topic, &part);
            all.extend(part);
            std::thread::sleep(Duration::from_millis(300)); // pacing, not synchronisation
        }
        all
    })
}

#[test]
fn a_dedup_job_killed_at_random_with_its_state_dir_lost_commits_exactly_the_reference() {
    let job = job::job_dir("dedup-crash");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let plugin = support::plugin("dedup");
    let config = format!("[operators.config]\nhorizon_ms = \"{HORIZON_MS}\"\n");
    job.one_operator(2, 100, ("dedup", &plugin, true), &config, "");
    let log = job.dir.path().join("weir.log");
    let seed = support::crash_seed();
    let producer = produce_paced(&job.input, seed, 30);

    // A first run long enough to checkpoint state, killed, restarted without its state_dir.
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", 3, Duration::from_secs(60));
    job::wait_for_committed_state(&log, Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    job::kill_at_random_moments(&job, &log, 12, seed, StateDir::Lost);
    let input = producer.join().expect("producer thread");

    let expected = reference(&input);
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(180), &mut child);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(complete, "output incomplete after 180 s ({} of {}); log:\n{text}", tail.records.len(), expected.len());
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{text}");

    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let mut actual: Vec<(Vec<u8>, Vec<u8>)> =
        committed.into_iter().map(|(_, key, value)| (key.expect("dedup keeps keys"), value)).collect();
    let mut expected = expected;
    actual.sort();
    expected.sort();
    let missing = expected.iter().filter(|record| actual.binary_search(record).is_err()).count();
    assert!(
        actual == expected,
        "the committed output is not the reference: {} records for {} expected, {missing} of them missing",
        actual.len(),
        expected.len()
    );
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no rebuild without the state_dir:\n{text}");
    let restores: Vec<&str> = text.lines().filter(|line| line.contains("restored keyed state")).collect();
    assert!(restores.iter().any(|line| !line.contains("entries=0")), "no restore found state:\n{text}");
    eprintln!(
        "dedup: {} records in, {} passed on, {} restores, {} checkpoints committed",
        input.len(),
        expected.len(),
        restores.len(),
        job::count_in_log(&log, "checkpoint committed")
    );
}
