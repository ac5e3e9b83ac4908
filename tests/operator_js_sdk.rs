//! The JavaScript SDK (`guest-sdk/js`) and its example `plugins/js-total`: the SDK's own
//! tests under Node, the README's example built as a plugin, js-total's totals and
//! refusals, its output unchanged by a restore into a fresh instance every few batches,
//! `weir check --save-snapshot`/`--restore`, and a real job SIGKILLed at random with the
//! state_dir deleted before half the restarts, whose committed output is exact.

use crate::operator_common as common;
use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{Image, apply, batch, changes, config, load, plugin_path, records, restore};
use support::clicks::{START_MS, java_partition};
use support::job;
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};
use weir::chunk::StateChunk;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

fn assert_ok(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

fn check(plugin: &Path, args: &[&str]) -> Output {
    job::weir()
        .arg("check")
        .arg(plugin)
        .args(args)
        .env("WEIR_CACHE_DIR", common::cache_dir())
        .env("RUST_LOG", "error")
        .output()
        .expect("run weir check")
}

fn new(label: &str) -> OperatorInstance {
    OperatorInstance::new(&load("js-total"), Limits::default(), config(&[("field", "n")]), label.to_owned())
        .unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn the_sdk_passes_its_node_tests() {
    let sdk = root().join("guest-sdk/js");
    let tests: Vec<PathBuf> = std::fs::read_dir(sdk.join("test"))
        .expect("guest-sdk/js/test")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.to_string_lossy().ends_with(".test.mjs"))
        .collect();
    assert!(tests.len() >= 2, "no Node tests in {}", sdk.display());
    let out = Command::new("node")
        .current_dir(&sdk)
        .args(["--import", "./test/register.mjs", "--test"])
        .args(&tests)
        .output()
        .expect("node (install Node.js 20 or newer)");
    let stdout = assert_ok("node --test guest-sdk/js/test", &out);
    assert!(stdout.contains("# fail 0"), "{stdout}");
}

#[test]
fn javascript_total_sums_a_field_per_key_and_snapshots_changed_keys() {
    let mut op = new("total");
    let mut input = batch(&[
        (Some("u1"), r#"{"n":5}"#, 10),
        (Some("u2"), r#"{"n":2.5}"#, 11),
        (Some("u1"), r#"{"n":7,"note":"x"}"#, 12),
        (None, r#"{"n":-3}"#, 13),
        (Some("u3"), "not json", 14),
        (Some("u3"), r#"{"n":"7"}"#, 15),
        (Some("u3"), r#"[1]"#, 16),
        (Some("u3"), r#"{"n":1e308}"#, 17),
        (Some("u3"), r#"{"n":1e308}"#, 18),
    ]);
    input.push(Some(b"\xffk"), br#"{"n":1}"#, 19, &[]);
    let out = records(&op.process(&input).unwrap_or_else(|err| panic!("{err}")));
    assert_eq!(
        out,
        [
            (Some("u1".into()), r#"{"key":"u1","total":5}"#.into(), 10),
            (Some("u2".into()), r#"{"key":"u2","total":2.5}"#.into(), 11),
            (Some("u1".into()), r#"{"key":"u1","total":12}"#.into(), 12),
            (None, r#"{"key":"","total":-3}"#.into(), 13),
            (Some("u3".into()), r#"{"key":"u3","total":1e+308}"#.into(), 17),
            (Some("\u{fffd}k".into()), "{\"key\":\"\u{fffd}k\",\"total\":1}".into(), 19),
        ],
        "the second 1e308 would make u3's total infinite: dropped"
    );
    // Every changed key once; an entry is layout 0x01, version 0x01, then JSON.
    let round = common::round(&mut op, 10);
    assert!(round.len() >= 3, "10 bytes per chunk: {} chunks", round.len());
    let mut entries: Vec<(Vec<u8>, Vec<u8>)> =
        round.iter().flat_map(|c| c.iter().map(|(k, v)| (k.to_vec(), v.expect("no removals").to_vec()))).collect();
    entries.sort();
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        [(&b""[..], &b"-3"[..]), (b"u1", b"12"), (b"u2", b"2.5"), (b"u3", b"1e+308"), (b"\xffk", b"1")]
            .iter()
            .map(|(k, v)| (k.to_vec(), [&[1u8, 1][..], v].concat()))
            .collect();
    assert_eq!(entries, expected);
    assert!(common::round(&mut op, 10).is_empty(), "nothing changed since");
    op.process(&batch(&[(Some("u1"), r#"{"n":1}"#, 30)])).unwrap();
    let next: Vec<_> = common::round(&mut op, 0).iter().flat_map(|c| c.iter().map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))).collect();
    assert_eq!(next, [(b"u1".to_vec(), Some(b"\x01\x0113".to_vec()))]);
}

#[test]
fn javascript_total_refuses_unknown_config_and_bad_restores() {
    let plugin = load("js-total");
    let err = OperatorInstance::new(&plugin, Limits::default(), config(&[("field", "n"), ("bogus", "1")]), "total".into())
        .err()
        .expect("an unknown config key is refused");
    assert!(err.to_string().contains("js-total: operator config has unknown key `bogus`; js-total knows: `field`"), "{err}");
    let err = OperatorInstance::new(&plugin, Limits::default(), config(&[]), "total".into()).err().expect("field is required");
    assert!(err.to_string().contains("operator config `field` is missing or empty"), "{err}");

    let chunk = |pairs: &[(&[u8], Option<&[u8]>)]| {
        let mut chunk = StateChunk::default();
        for (key, value) in pairs {
            chunk.push(key, *value);
        }
        chunk
    };
    for (bad, why) in [
        (chunk(&[(b"k", Some(b"\x01\x027"))]), "state version 2, but this plugin reads version 1"),
        (chunk(&[(b"k", Some(b"\x02\x01{}"))]), "holds tumbling windows, but this operator keeps a KeyedState value"),
        (chunk(&[(b"k", Some(b"\x01"))]), "was not written by this SDK"),
        (chunk(&[(b"k", Some(b"\x01\x01{"))]), "its value does not decode"),
        (chunk(&[(b"k", Some(b"\x01\x017")), (b"k", Some(b"\x01\x018"))]), "restored already"),
    ] {
        let err = new("total").restore(&bad).expect_err(why);
        let message = err.to_string();
        assert!(message.contains("js-total: cannot restore key \"k\"") && message.contains(why), "{message}");
    }
}

/// Seeded batches of keyed and keyless records: integers, halves and values that are not JSON.
fn steps() -> Vec<Batch> {
    let mut state = 0x9e37_79b9_u64;
    (0..24)
        .map(|b| {
            let n = 1 + support::next_random(&mut state) % 12;
            let records: Vec<(Option<String>, String, i64)> = (0..n)
                .map(|i| {
                    let r = support::next_random(&mut state);
                    let key = (!r.is_multiple_of(7)).then(|| format!("k{}", r % 9));
                    let value = match r % 13 {
                        0 => "not json".to_owned(),
                        1 => format!(r#"{{"n":{}.5}}"#, r % 5),
                        _ => format!(r#"{{"n":{}}}"#, (r >> 8) % 100),
                    };
                    (key, value, b * 100 + i as i64)
                })
                .collect();
            let borrowed: Vec<(Option<&str>, &str, i64)> = records.iter().map(|(k, v, t)| (k.as_deref(), v.as_str(), *t)).collect();
            batch(&borrowed)
        })
        .collect()
}

#[test]
fn javascript_total_restored_every_few_batches_emits_what_it_emits_straight_through() {
    let input = steps();
    let mut straight = new("straight");
    let expected: Vec<_> = input.iter().flat_map(|b| records(&straight.process(b).unwrap())).collect();
    assert!(expected.len() > 50, "{} records", expected.len());

    let mut op = new("resumed-0");
    let mut image = Image::new();
    let mut actual = Vec::new();
    for (i, step) in input.iter().enumerate() {
        actual.extend(records(&op.process(step).unwrap_or_else(|err| panic!("{err}"))));
        apply(&mut image, &changes(&mut op));
        if i % 3 == 2 {
            drop(op);
            op = new(&format!("resumed-{i}"));
            restore(&mut op, &image, i as i64 * 100);
            assert!(changes(&mut op).is_empty(), "restored entries are not changes");
        }
    }
    assert_eq!(actual, expected);
}

#[test]
fn javascript_total_saves_and_restores_a_snapshot_with_weir_check() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("total.json").display().to_string();
    let plugin = plugin_path("js-total");
    let first = assert_ok(
        "weir check js-total --save-snapshot",
        &check(&plugin, &["--config", "field=n", "--record", r#"a={"n":5}@10"#, "--record", r#"b={"n":1}@11"#, "--record", r#"a={"n":2}@12"#, "--watermark", "100", "--save-snapshot", &saved]),
    );
    for line in [
        r#"process emitted: key "a" value "{\"key\":\"a\",\"total\":7}" @12"#,
        "snapshot (2 changed keys",
        "saved:    2 entries",
        "ok: ",
    ] {
        assert!(first.contains(line), "no `{line}` in\n{first}");
    }
    let second = assert_ok("weir check js-total --restore", &check(&plugin, &["--config", "field=n", "--restore", &saved, "--record", r#"a={"n":1}@20"#]));
    for line in ["restore:  2 entries", r#"process emitted: key "a" value "{\"key\":\"a\",\"total\":8}" @20"#] {
        assert!(second.contains(line), "no `{line}` in\n{second}");
    }
    // Another plugin's state is refused, naming the key (window-count's entries happen to
    // start with the same two bytes, so they are refused as values that do not decode).
    let other = dir.path().join("window.json").display().to_string();
    assert_ok(
        "weir check window-count --save-snapshot",
        &check(&plugin_path("window-count"), &["--config", "window_ms=1000", "--record", "a=x@5", "--watermark", "100", "--save-snapshot", &other]),
    );
    let out = check(&plugin, &["--config", "field=n", "--restore", &other]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("js-total: cannot restore key \"a\": its value does not decode"), "{stderr}");
}

/// The first ```js block of the SDK's README.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(root().join("guest-sdk/js/README.md")).expect("guest-sdk/js/README.md");
    let start = readme.find("```js\n").expect("a ```js block in guest-sdk/js/README.md") + "```js\n".len();
    let end = start + readme[start..].find("```").expect("the block ends");
    readme[start..end].to_owned()
}

#[test]
fn the_readme_example_builds_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let entry = dir.path().join("max.js");
    std::fs::write(&entry, readme_example()).unwrap();
    let wasm = dir.path().join("max.wasm");
    let out = Command::new("node")
        .current_dir(root())
        .arg("guest-sdk/js/build.mjs")
        .arg(&entry)
        .arg(&wasm)
        .output()
        .expect("node");
    assert_ok("node guest-sdk/js/build.mjs on the README's example", &out);
    let saved = dir.path().join("max.json").display().to_string();
    let first = assert_ok(
        "weir check on the README's example",
        &check(&wasm, &["--config", "field=price", "--record", r#"a={"price":3}@1"#, "--record", r#"a={"price":9}@2"#, "--record", r#"a={"price":4}@3"#, "--watermark", "100", "--save-snapshot", &saved]),
    );
    for line in [r#"value "{\"key\":\"a\",\"max\":3}" @1"#, r#"value "{\"key\":\"a\",\"max\":9}" @2"#, "saved:    1 entries"] {
        assert!(first.contains(line), "no `{line}` in\n{first}");
    }
    assert!(!first.contains(r#"@3"#), "4 is no new maximum:\n{first}");
    let second = assert_ok("weir check --restore on the README's example", &check(&wasm, &["--config", "field=price", "--restore", &saved, "--record", r#"a={"price":10}@4"#]));
    assert!(second.contains(r#"value "{\"key\":\"a\",\"max\":10}" @4"#), "{second}");
}

const PARTITIONS: i32 = 4;

/// Keyed input: each record in its key's partition (so each key's records keep their
/// order), `{"n":<int>}` values, in `chunks` chunks produced 300 ms apart.
fn produce_paced(topic: &str, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<support::clicks::Input>> {
    let topic = topic.to_owned();
    std::thread::spawn(move || {
        let mut state = seed | 1;
        let mut all = Vec::new();
        for c in 0..chunks {
            let chunk: Vec<_> = (0..2_000)
                .map(|i| {
                    let r = support::next_random(&mut state);
                    let key = format!("user-{}", r % 400);
                    let partition = java_partition(key.as_bytes(), PARTITIONS);
                    let value = format!(r#"{{"n":{},"page":"/p/{}"}}"#, (r >> 20) % 1000, r % 50);
                    (partition, key.into_bytes(), value.into_bytes(), START_MS + (c * 2_000 + i) as i64)
                })
                .collect();
            support::produce(&topic, &chunk);
            all.extend(chunk);
            std::thread::sleep(Duration::from_millis(300)); // pacing, not synchronisation
        }
        all
    })
}

/// What js-total must commit: per key, in its partition's order, each running total once.
fn reference(input: &[support::clicks::Input]) -> BTreeMap<(Vec<u8>, Vec<u8>), usize> {
    let mut totals: BTreeMap<&[u8], i64> = BTreeMap::new();
    let mut expected = BTreeMap::new();
    for (_, key, value, _) in input {
        let text = String::from_utf8_lossy(value);
        let n: i64 = text.split_once(r#""n":"#).and_then(|(_, rest)| rest.split(',').next()).and_then(|n| n.parse().ok()).expect("n");
        let total = totals.entry(key).or_default();
        *total += n;
        let out = format!(r#"{{"key":"{}","total":{total}}}"#, String::from_utf8_lossy(key));
        *expected.entry((key.clone(), out.into_bytes())).or_default() += 1;
    }
    expected
}

#[test]
fn javascript_total_survives_sigkill_and_a_lost_state_dir_exactly() {
    let job = job::job_dir("js-total");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let plugin = support::plugin("js-total");
    job.one_operator(2, 100, ("total", &plugin, true), "[operators.config]\nfield = \"n\"\n", "");
    let log = job.dir.path().join("weir.log");
    let seed = support::crash_seed();
    let producer = produce_paced(&job.input, seed, 25);

    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", 3, Duration::from_secs(120));
    job::wait_for_committed_state(&log, Duration::from_secs(60));
    job::kill(&mut child);
    let mut state = seed;
    let kills = 8;
    for kill in 0..kills {
        if kill % 2 == 0 && job.state_dir().exists() {
            std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
        }
        let delay = Duration::from_millis(300 + support::next_random(&mut state) % 2500);
        let mut child = job::start(&job.path(), &log, &[]);
        let started = Instant::now();
        if let Some(status) = job::wait(&mut child, delay) {
            panic!("weir exited by itself with {status} after {:?}; log:\n{}", started.elapsed(), job::read_log(&log));
        }
        job::kill(&mut child);
    }
    let input = producer.join().expect("producer thread");
    let expected = reference(&input);

    // The last run too starts without a state_dir: its state comes from the changelog alone.
    if job.state_dir().exists() {
        std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    }
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = support::Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(input.len(), Duration::from_secs(240), &mut child);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(complete, "output incomplete after 240 s ({} of {}); log:\n{text}", tail.records.len(), input.len());
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, support::Isolation::ReadCommitted);
    let actual = support::clicks::as_multiset(&committed);
    assert!(actual == expected, "{}", support::clicks::difference(&expected, &actual));
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no restart rebuilt a lost state_dir:\n{text}");
    let restores = text.lines().filter(|line| line.contains("restored keyed state") && !line.contains("entries=0")).count();
    assert!(restores > 0, "no restart restored any state:\n{text}");
    eprintln!("js-total: {} kills, the state_dir deleted before half the restarts; {} records checked exactly; {restores} restores with state", kills + 1, input.len());
}
