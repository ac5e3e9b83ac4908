//! weir_sdk, the Python SDK (`guest-sdk/python`), through real components: its unit tests
//! under CPython; its examples (`py-total`, `py-window-max` and the README's session
//! count) restored into a fresh instance every few batches emit exactly what they emit
//! straight through, and what a reference computed here says; `weir check` saves and
//! restores their state and refuses bad state naming the key; and py-window-max in a
//! real job, SIGKILLed at random with its state_dir deleted before half the restarts,
//! commits exactly the reference output.

use crate::operator_common as common;
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Image, apply, config, records, restore, round};
use support::clicks::{self, Clicks};
use support::job::{self, StateDir};
use support::{Isolation, Tail};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance, Plugin};

/// An emitted record as text: (key, value, timestamp).
type Out = (Option<String>, String, i64);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// componentize-py's virtualenv, as scripts/setup-guest-toolchains makes it.
fn py_venv() -> PathBuf {
    std::env::var_os("WEIR_PY_VENV").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/weir/py-venv"),
        PathBuf::from,
    )
}

fn succeeded(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn the_python_sdk_passes_its_unit_tests() {
    let out = Command::new(py_venv().join("bin/python"))
        .current_dir(root())
        .args(["-m", "unittest", "discover", "-s", "guest-sdk/python/tests"])
        .env("WEIR_BINDINGS_DIR", PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-py-bindings"))
        .output()
        .expect("run python -m unittest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the SDK's unit tests failed:\n{stderr}");
    assert!(stderr.contains("OK") && !stderr.contains("Ran 0 tests"), "{stderr}");
}

/// Deterministic pseudo-random numbers (xorshift64), so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// One step of input: a batch to process or a watermark to advance to.
enum Step {
    Process(Batch),
    Watermark(i64),
}

/// A number as Python's `json.dumps` prints it (the inputs are halves, far from 1e16).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    fn add(self, other: Num) -> Num {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Num::Int(a + b),
            (a, b) => Num::Float(a.float() + b.float()),
        }
    }

    fn float(self) -> f64 {
        match self {
            Num::Int(n) => n as f64,
            Num::Float(f) => f,
        }
    }

    fn json(self) -> String {
        match self {
            Num::Int(n) => n.to_string(),
            Num::Float(f) if f.fract() == 0.0 => format!("{f:.1}"),
            Num::Float(f) => f.to_string(),
        }
    }
}

/// An input record: its key, its value and, if the value carries one, the number in `n`.
struct In {
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    ts: i64,
    n: Option<Num>,
}

const KEYS: [Option<&[u8]>; 9] =
    [None, Some(b""), Some(b"a"), Some(b"b"), Some(b"c"), Some(b"dd"), Some(b"e"), Some(b"\xffk"), Some(b"f")];

/// `batches` batches of keyed records with numbers (ints and halves) and some values
/// without one, event time advancing with jitter, each batch followed by a watermark a
/// little behind it, so that some records come late.
fn input(seed: u64, batches: usize) -> Vec<(Vec<In>, i64)> {
    let mut rng = Rng(seed);
    let mut base = 1_000_000;
    (0..batches)
        .map(|_| {
            let records = (0..10 + rng.next(40))
                .map(|_| {
                    base += rng.next(30) as i64;
                    let ts = base + rng.next(600) as i64 - 300;
                    let key = KEYS[rng.next(KEYS.len() as u64) as usize].map(<[u8]>::to_vec);
                    let (value, n) = match rng.next(12) {
                        0 => ("not json".to_owned(), None),
                        1 => (r#"{"n":"7"}"#.to_owned(), None),
                        2 => (r#"{"n":true,"m":1}"#.to_owned(), None),
                        3 | 4 => {
                            let half = (rng.next(200) as i64 - 100) as f64 + 0.5;
                            (format!(r#"{{"n":{half}}}"#), Some(Num::Float(half)))
                        }
                        _ => {
                            let n = rng.next(2001) as i64 - 1000;
                            (format!(r#"{{"n":{n},"page":"/p/{}"}}"#, rng.next(50)), Some(Num::Int(n)))
                        }
                    };
                    In { key, value: value.into_bytes(), ts, n }
                })
                .collect();
            (records, base - 200)
        })
        .collect()
}

fn steps(input: &[(Vec<In>, i64)]) -> Vec<Step> {
    let mut steps = Vec::new();
    for (records, watermark) in input {
        let mut batch = Batch::new();
        for r in records {
            batch.push(r.key.as_deref(), &r.value, r.ts, &[]);
        }
        steps.push(Step::Process(batch));
        steps.push(Step::Watermark(*watermark));
    }
    steps.push(Step::Watermark(i64::MAX));
    steps
}

fn text(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// py-total's output for `input`: every record with a number, with its key's new total.
fn totals_reference(input: &[(Vec<In>, i64)]) -> Vec<Out> {
    let mut totals: BTreeMap<Vec<u8>, Num> = BTreeMap::new();
    let mut out = Vec::new();
    for r in input.iter().flat_map(|(records, _)| records) {
        let Some(n) = r.n else { continue };
        let state_key = r.key.clone().unwrap_or_default();
        let total = totals.get(&state_key).map_or(n, |t| t.add(n));
        totals.insert(state_key.clone(), total);
        let value = format!(r#"{{"key":"{}","total":{}}}"#, text(&state_key), total.json());
        out.push((r.key.as_deref().map(text), value, r.ts));
    }
    out
}

/// py-window-max's output: per key and tumbling window the greatest number, emitted
/// when a watermark reaches the window's end; a record for a fired window is dropped.
fn window_max_reference(input: &[(Vec<In>, i64)], size: i64) -> Vec<Out> {
    let mut open: BTreeMap<(i64, Vec<u8>), Num> = BTreeMap::new();
    let mut fired_to = i64::MIN;
    let mut out = Vec::new();
    let fire = |open: &mut BTreeMap<(i64, Vec<u8>), Num>, watermark: i64, out: &mut Vec<Out>| {
        let done: Vec<_> = open.keys().filter(|(start, _)| start + size <= watermark).cloned().collect();
        for (start, key) in done {
            let max = open.remove(&(start, key.clone())).expect("open window");
            let value = format!(
                r#"{{"key":"{}","window_start":{start},"window_end":{},"max":{}}}"#,
                text(&key),
                start + size,
                max.json()
            );
            out.push((Some(text(&key)), value, start + size - 1));
        }
    };
    for (records, watermark) in input {
        for r in records {
            let (Some(n), start) = (r.n, r.ts.div_euclid(size) * size) else { continue };
            if start + size <= fired_to {
                continue;
            }
            let slot = open.entry((start, r.key.clone().unwrap_or_default())).or_insert(n);
            if n.float() > slot.float() {
                *slot = n;
            }
        }
        fired_to = fired_to.max(*watermark);
        fire(&mut open, *watermark, &mut out);
    }
    fire(&mut open, i64::MAX, &mut out);
    out
}

/// The README's session count: per key, sessions of records less than `gap` apart (a
/// record opens [ts, ts + gap); sessions that overlap or touch merge), each counted and
/// emitted when the watermark reaches its end, by end then key; a record whose session
/// would be complete already and that merges with none is dropped.
fn sessions_reference(input: &[(Vec<In>, i64)], gap: i64) -> Vec<Out> {
    let mut sessions: BTreeMap<Vec<u8>, Vec<(i64, i64, u64)>> = BTreeMap::new();
    let mut fired_to = i64::MIN;
    let mut out = Vec::new();
    let fire = |sessions: &mut BTreeMap<Vec<u8>, Vec<(i64, i64, u64)>>, watermark: i64, out: &mut Vec<Out>| {
        let mut done = Vec::new();
        for (key, list) in sessions.iter_mut() {
            done.extend(list.iter().filter(|s| s.1 <= watermark).map(|s| (s.1, key.clone(), s.0, s.2)));
            list.retain(|s| s.1 > watermark);
        }
        sessions.retain(|_, list| !list.is_empty());
        done.sort();
        for (end, key, start, count) in done {
            let value = format!(r#"{{"start": {start}, "end": {end}, "count": {count}}}"#);
            out.push((Some(text(&key)), value, end - 1));
        }
    };
    for (records, watermark) in input {
        for r in records {
            let list = sessions.entry(r.key.clone().unwrap_or_default()).or_default();
            let (mut start, mut end, mut count) = (r.ts, r.ts + gap, 1);
            let (touching, apart): (Vec<(i64, i64, u64)>, Vec<_>) =
                std::mem::take(list).into_iter().partition(|s| s.0 <= end && start <= s.1);
            if touching.is_empty() && end <= fired_to {
                *list = apart;
                continue;
            }
            for s in &touching {
                (start, end, count) = (start.min(s.0), end.max(s.1), count + s.2);
            }
            *list = apart;
            list.push((start, end, count));
            list.sort();
        }
        sessions.retain(|_, list| !list.is_empty());
        fired_to = fired_to.max(*watermark);
        fire(&mut sessions, *watermark, &mut out);
    }
    fire(&mut sessions, i64::MAX, &mut out);
    out
}

/// Fails naming the first record where `actual` and `expected` part, not all of them.
fn assert_same(actual: &[Out], expected: &[Out], what: &str) {
    let at = actual.iter().zip(expected).position(|(a, e)| a != e).unwrap_or(actual.len().min(expected.len()));
    assert!(
        actual.len() == expected.len() && at == actual.len(),
        "{what}: {} records, {} expected; first difference at {at}: {:?} where {:?} was expected",
        actual.len(),
        expected.len(),
        actual.get(at),
        expected.get(at)
    );
}

fn instance(plugin: &Plugin, cfg: &[(&str, &str)], label: &str) -> OperatorInstance {
    OperatorInstance::new(plugin, Limits::default(), config(cfg), label.to_owned()).unwrap_or_else(|err| panic!("{err}"))
}

fn run(instance: &mut OperatorInstance, step: &Step, output: &mut Vec<Out>) {
    let out = match step {
        Step::Process(batch) => instance.process(batch),
        Step::Watermark(watermark) => instance.on_watermark(*watermark),
    };
    output.extend(records(&out.unwrap_or_else(|err| panic!("{err}"))));
}

/// A round cut at `max_bytes`, applied to `image`: every chunk within its bound (the
/// helper checks) and no key twice in the round.
fn checkpoint(instance: &mut OperatorInstance, max_bytes: u32, image: &mut Image) -> usize {
    let chunks = round(instance, max_bytes);
    let mut seen = BTreeSet::new();
    for chunk in &chunks {
        for (key, _) in chunk.iter() {
            assert!(seen.insert(key.to_vec()), "key {:?} twice in one round", text(key));
        }
        apply(image, chunk);
    }
    seen.len()
}

/// Runs `steps` straight through in one instance, and again with a checkpoint after
/// every step (chunks of 1, 64 or 4096 bytes) and a restore into a fresh instance after
/// every third; returns the output, which must be the same both ways. `windowed`: the
/// state is windows, all fired by the last step's end of time.
fn straight_and_restored(plugin: &Plugin, cfg: &[(&str, &str)], steps: &[Step], windowed: bool) -> Vec<Out> {
    let mut straight = Vec::new();
    let mut one = instance(plugin, cfg, "straight");
    for step in steps {
        run(&mut one, step, &mut straight);
    }

    let mut resumed = Vec::new();
    let mut current = instance(plugin, cfg, "resumed");
    let (mut image, mut watermark, mut restores, mut changed) = (Image::new(), i64::MIN, 0, 0);
    for (i, step) in steps.iter().enumerate() {
        run(&mut current, step, &mut resumed);
        if let Step::Watermark(w) = step {
            watermark = *w;
        }
        changed += checkpoint(&mut current, [1, 64, 4096][i % 3], &mut image);
        if i % 3 == 2 {
            current = instance(plugin, cfg, "restored");
            restore(&mut current, &image, watermark);
            assert_eq!(checkpoint(&mut current, 4096, &mut Image::new()), 0, "restored entries are not changes");
            restores += 1;
        }
    }
    let name = plugin.path().display();
    assert!(restores > 10 && changed > 100, "{name}: {restores} restores, {changed} changed keys prove little");
    assert!(!windowed || image.is_empty(), "{name}: windows left open after the end of time");
    assert_same(&resumed, &straight, &format!("{name}: output with restores every three steps"));
    straight
}

#[test]
fn py_total_restored_every_few_batches_emits_the_reference_totals() {
    let input = input(0x5eed_0001, 60);
    let out = straight_and_restored(&common::load("py-total"), &[("field", "n")], &steps(&input), false);
    assert_same(&out, &totals_reference(&input), "py-total against the reference");
}

#[test]
fn py_window_max_restored_every_few_batches_emits_the_reference_maxima() {
    let input = input(0x5eed_0002, 60);
    let cfg = [("field", "n"), ("window_ms", "500")];
    let out = straight_and_restored(&common::load("py-window-max"), &cfg, &steps(&input), true);
    let expected = window_max_reference(&input, 500);
    assert!(expected.len() > 100, "only {} windows", expected.len());
    assert_same(&out, &expected, "py-window-max against the reference");
}

/// The Python code block of guest-sdk/python/README.md.
fn readme_example() -> String {
    let readme = std::fs::read_to_string(root().join("guest-sdk/python/README.md")).expect("guest-sdk/python/README.md");
    let start = readme.find("```python\n").expect("the README has a ```python block") + "```python\n".len();
    let end = readme[start..].find("```").expect("the block ends") + start;
    readme[start..end].to_owned()
}

/// Builds the README's example with the command the README gives.
fn build_readme_example() -> PathBuf {
    let readme = std::fs::read_to_string(root().join("guest-sdk/python/README.md")).expect("README");
    let command = "componentize-py -d wit/0.3 -w operator componentize app -p plugins/NAME -p guest-sdk/python -o NAME.wasm";
    assert!(readme.contains(command), "guest-sdk/python/README.md no longer gives the build command `{command}`");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("weir-py-readme-example");
    std::fs::create_dir_all(&dir).expect("create the example's directory");
    std::fs::write(dir.join("app.py"), readme_example()).expect("write app.py");
    let wasm = dir.join("sessions.wasm");
    let out = Command::new(py_venv().join("bin/componentize-py"))
        .current_dir(root())
        .args(["-d", "wit/0.3", "-w", "operator", "componentize", "app", "-p"])
        .arg(&dir)
        .args(["-p", "guest-sdk/python", "-o"])
        .arg(&wasm)
        .output()
        .expect("run componentize-py (scripts/setup-guest-toolchains installs it)");
    succeeded("componentize-py on the README's example", &out);
    wasm
}

#[test]
fn the_readme_session_count_builds_and_restored_every_few_batches_emits_the_reference() {
    let wasm = build_readme_example();
    let plugin = Plugin::load(common::runtime(), &wasm).unwrap_or_else(|err| panic!("{err}"));
    let input = input(0x5eed_0003, 60);
    let expected = sessions_reference(&input, 40);
    assert!(expected.len() > 100, "only {} sessions", expected.len());
    let out = straight_and_restored(&plugin, &[("gap_ms", "40")], &steps(&input), true);
    assert_same(&out, &expected, "the README's session count against the reference");
    let err = OperatorInstance::new(&plugin, Limits::default(), config(&[("gap_ms", "0")]), "bad".into())
        .err()
        .expect("a gap of 0 is refused");
    assert!(err.to_string().contains("`gap_ms` = 0 is out of range"), "{err}");
}

fn check(plugin: &str, args: &[&str]) -> Output {
    job::weir()
        .arg("check")
        .arg(common::plugin_path(plugin))
        .args(args)
        .env("WEIR_CACHE_DIR", common::cache_dir())
        .env("RUST_LOG", "error")
        .output()
        .expect("run weir check")
}

fn check_passes(plugin: &str, args: &[&str], lines: &[&str]) {
    let stdout = succeeded(&format!("weir check {plugin} {args:?}"), &check(plugin, args));
    for line in lines {
        assert!(stdout.contains(line), "weir check {plugin}: no `{line}` in\n{stdout}");
    }
}

fn check_fails(plugin: &str, args: &[&str], expected: &str) {
    let out = check(plugin, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "weir check {plugin} {args:?} must fail:\n{}", String::from_utf8_lossy(&out.stdout));
    let error = stderr.lines().find(|line| line.starts_with("error: ")).unwrap_or_default();
    assert!(error.contains("restore returned an error") && error.contains(expected), "`{expected}` expected:\n{stderr}");
}

/// A snapshot file of `weir check` holding one entry of key `a`, its value in hex.
fn snapshot_file(dir: &Path, name: &str, value_hex: &str) -> String {
    let path = dir.join(name);
    let text = format!(
        r#"{{"format":"weir-check-snapshot-1","plugin":"py-window-max.wasm","watermark":1000,"entries":[{{"key":"61","value":"{value_hex}"}}]}}"#
    );
    std::fs::write(&path, text).expect("write a snapshot file");
    path.display().to_string()
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[test]
fn weir_check_saves_and_restores_sdk_state_and_refuses_bad_state_naming_the_key() {
    let dir = tempfile::tempdir().expect("a scratch dir");
    let saved = dir.path().join("max.json").display().to_string();
    let with = |extra: &[&str]| {
        let mut args = vec!["--config", "field=n", "--config", "window_ms=1000"];
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_owned).collect::<Vec<String>>()
    };
    let first = with(&[
        "--record", r#"a={"n":3}@100"#, "--record", r#"b={"n":2.5}@200"#, "--record", r#"a={"n":7}@1500"#,
        "--watermark", "1000", "--save-snapshot", &saved,
    ]);
    check_passes("py-window-max", &strs(&first), &[
        r#"on-watermark emitted: key "a" value "{\"key\":\"a\",\"window_start\":0,\"window_end\":1000,\"max\":3}" @999"#,
        r#"on-watermark emitted: key "b" value "{\"key\":\"b\",\"window_start\":0,\"window_end\":1000,\"max\":2.5}" @999"#,
        "saved:    1 entries at watermark 1000",
    ]);
    // The restored window [1000, 2000) holds a's 7; 5 does not beat it, and 100 at 10 is late.
    let second = with(&["--restore", &saved, "--record", r#"a={"n":5}@1600"#, "--record", r#"a={"n":100}@10"#]);
    check_passes("py-window-max", &strs(&second), &[
        "restore:  1 entries at watermark 1000",
        r#"on-watermark emitted: key "a" value "{\"key\":\"a\",\"window_start\":1000,\"window_end\":2000,\"max\":7}" @1999"#,
    ]);
    let other_size = ["--config", "field=n", "--config", "window_ms=500", "--restore", saved.as_str()];
    check_fails("py-window-max", &other_size, "cannot restore key b'a': it holds windows of 1000 ms");

    let totals = dir.path().join("total.json").display().to_string();
    let total = ["--config", "field=n", "--record", r#"u1={"n":5}"#, "--watermark", "0", "--save-snapshot", &totals];
    check_passes("py-total", &total, &["saved:    1 entries at watermark 0"]);
    let total = ["--config", "field=n", "--restore", &totals, "--record", r#"u1={"n":2}@7"#];
    check_passes("py-total", &total, &[r#"process emitted: key "u1" value "{\"key\":\"u1\",\"total\":7}" @7"#]);

    // Another plugin's state, another state version, a body cut short, no body at all.
    for (file, expected) in [
        (totals.clone(), r"cannot restore key b'u1': its state b'\x015' is not a version 1 window state"),
        (snapshot_file(dir.path(), "v2.json", "025b313030302c5b5d5d"), r"does not start with state encoding version 1 (got b'\x02[1000,[')"),
        (snapshot_file(dir.path(), "cut.json", "015b313030302c5b5b"), r"cannot restore key b'a': its state b'\x01[1000,[[' is not a version 1 window state"),
        (snapshot_file(dir.path(), "empty.json", ""), "does not start with state encoding version 1 (got b'')"),
    ] {
        check_fails("py-window-max", &strs(&with(&["--restore", &file])), expected);
    }
}

const PARTITIONS: i32 = 4;
const WINDOW_MS: i64 = 2000;

/// Click records whose values carry a number `n` (-1000..=1000), arriving in `chunks`
/// chunks of 2,500 records 300 ms apart; no flush records, so windows stay open until
/// the test sends them. Returns everything produced.
fn produce_numbers(topic: &str, seed: u64, chunks: usize) -> std::thread::JoinHandle<Vec<clicks::Input>> {
    let topic = topic.to_owned();
    std::thread::spawn(move || {
        let mut clicks = Clicks::new(seed, PARTITIONS, 300);
        let mut rng = Rng(seed | 1);
        let mut all = Vec::new();
        for _ in 0..chunks {
            let chunk: Vec<clicks::Input> = clicks
                .take(2_500)
                .into_iter()
                .map(|(partition, key, _, ts)| {
                    let value = format!(r#"{{"user":"{}","n":{}}}"#, text(&key), rng.next(2001) as i64 - 1000);
                    (partition, key, value.into_bytes(), ts)
                })
                .collect();
            support::produce(&topic, &chunk);
            all.extend(chunk);
            std::thread::sleep(Duration::from_millis(300)); // pacing, not synchronisation
        }
        all
    })
}

/// What py-window-max must commit for `input`: per key and window the greatest `n`,
/// each record once. Each partition's event time only grows, so nothing is late.
fn window_max_of(input: &[clicks::Input]) -> BTreeMap<(Vec<u8>, Vec<u8>), usize> {
    let mut max: BTreeMap<(Vec<u8>, i64), i64> = BTreeMap::new();
    for (_, key, value, ts) in input.iter().filter(|r| r.3 < clicks::FLUSH_MS) {
        let text = String::from_utf8_lossy(value);
        let n: i64 = text.rsplit_once("\"n\":").and_then(|(_, n)| n.trim_end_matches('}').parse().ok()).expect("a number");
        let slot = max.entry((key.clone(), ts.div_euclid(WINDOW_MS) * WINDOW_MS)).or_insert(n);
        *slot = (*slot).max(n);
    }
    max.into_iter()
        .map(|((key, start), n)| {
            let value = format!(
                r#"{{"key":"{}","window_start":{start},"window_end":{},"max":{n}}}"#,
                text(&key),
                start + WINDOW_MS
            );
            ((key, value.into_bytes()), 1)
        })
        .collect()
}

#[test]
fn py_window_max_survives_sigkill_and_lost_state_dirs_exactly() {
    let job = job::job_dir("py-wmax");
    support::create_topic(&job.input, PARTITIONS);
    support::create_topic(&job.output, PARTITIONS);
    let config = format!("[operators.config]\nfield = \"n\"\nwindow_ms = \"{WINDOW_MS}\"\n");
    job.one_operator(2, 100, ("max", &support::plugin("py-window-max"), true), &config, "");
    let seed = support::crash_seed();
    let producer = produce_numbers(&job.input, seed, 12);
    let log = job.dir.path().join("weir.log");

    // The first run compiles the plugin into the cache the later ones load it from. Its
    // windows are open (no flush yet), so the run after it, without the state_dir, must
    // rebuild them from the changelog alone.
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_more(&log, "checkpoint committed", 3, Duration::from_secs(240));
    job::wait_for_committed_state(&log, Duration::from_secs(60));
    job::kill(&mut child);
    std::fs::remove_dir_all(job.state_dir()).expect("deleting the state_dir");
    let mut child = job::start(&job.path(), &log, &[]);
    job::wait_for_log(&log, "restored keyed state", Duration::from_secs(120));
    job::kill(&mut child);
    let text = job::read_log(&log);
    let rebuilt = text.lines().find(|line| line.contains("restored keyed state")).expect("a restore");
    assert!(!rebuilt.contains("entries=0"), "the rebuild found no state: {rebuilt}");
    assert!(text.contains("rebuilding keyed state from the whole changelog"), "no rebuild without the state_dir:\n{text}");

    let while_running = job::kill_at_random_moments(&job, &log, 10, seed, StateDir::Lost);
    let mut input = producer.join().expect("producer thread");
    let flush: Vec<clicks::Input> =
        (0..PARTITIONS).map(|partition| (partition, b"flush".to_vec(), b"{}".to_vec(), clicks::FLUSH_MS)).collect();
    support::produce(&job.input, &flush);
    input.extend(flush);

    let expected = window_max_of(&input);
    let mut child = job::start(&job.path(), &log, &[]);
    let mut tail = Tail::new(&job.output, PARTITIONS);
    let complete = tail.until_while(expected.len(), Duration::from_secs(240), &mut child);
    let status = job::terminate(&mut child, Duration::from_secs(60));
    let text = job::read_log(&log);
    assert!(complete, "output incomplete after 240 s ({} of {}); log:\n{text}", tail.records.len(), expected.len());
    assert!(status.success(), "weir exited with {status} after SIGTERM; log:\n{text}");
    let committed = support::read_to_end(&job.output, PARTITIONS, Isolation::ReadCommitted);
    let actual = clicks::as_multiset(&committed);
    assert!(actual == expected, "{}", clicks::difference(&expected, &actual));
    let rebuilds = job::count_in_log(&log, "rebuilding keyed state from the whole changelog");
    let restores = text.lines().filter(|line| line.contains("restored keyed state") && !line.contains("entries=0")).count();
    eprintln!(
        "py-window-max: 12 kills ({while_running} of the random 10 in a running job), {rebuilds} rebuilds from the \
         changelog, {restores} restores with state; {} input records, {} windows exact",
        input.len(),
        expected.len()
    );
}
