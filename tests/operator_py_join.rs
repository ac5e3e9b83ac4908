//! py-enrich, the Python twin of enrich on weir_sdk's `Table` (a stream–table join),
//! through real components: its matches, misses and deletions; its config and ports
//! refused as enrich refuses them; restored into a fresh instance every few batches it
//! emits exactly what it emits straight through, snapshotting only the users that
//! changed; and on the same input it emits what the Rust enrich emits, values, headers
//! and outputs alike. The Python plugins on weir_sdk target weir:operator@0.3, the one
//! that implements the WIT by hand still 0.2.

use crate::operator_common as common;

use std::collections::BTreeSet;

use common::{Image, apply, config, load, restore, round};
use weir::batch::Batch;
use weir::operator::{Emitted, Limits, OperatorError, OperatorInstance, Ports, World};

const CLICKS: u32 = 0;
const USERS: u32 = 1;

/// An emitted record as text: key, value, timestamp, headers and the output it goes to.
type Out = (Option<String>, String, i64, Vec<(String, String)>, usize);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ports(inputs: &[&str], outputs: &[&str]) -> Ports {
    let names = |names: &[&str]| names.iter().map(|name| (*name).to_owned()).collect();
    Ports {
        inputs: names(inputs),
        outputs: names(outputs),
    }
}

fn start(
    plugin: &str,
    cfg: &[(&str, &str)],
    ports: Ports,
) -> Result<OperatorInstance, OperatorError> {
    OperatorInstance::with_ports(
        &load(plugin),
        Limits::default(),
        config(cfg),
        ports,
        format!("{plugin}[0]"),
    )
}

/// `plugin` reading `clicks` and `users`, writing `outputs`.
fn enrich(plugin: &str, cfg: &[(&str, &str)], outputs: &[&str]) -> OperatorInstance {
    start(plugin, cfg, ports(&["clicks", "users"], outputs)).unwrap_or_else(|err| panic!("{err}"))
}

fn outs(emitted: &Emitted) -> Vec<Out> {
    emitted
        .batch()
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let headers = r
                .headers()
                .map(|(name, value)| (name.to_owned(), text(value)))
                .collect();
            (
                r.key.map(text),
                text(r.value),
                r.timestamp,
                headers,
                emitted.output_of(index),
            )
        })
        .collect()
}

fn process(op: &mut OperatorInstance, input: u32, batch: &Batch) -> Vec<Out> {
    outs(
        &op.process_input(input, batch)
            .unwrap_or_else(|err| panic!("{err}")),
    )
}

/// A batch of `(key, value, timestamp)` records, each with the headers given.
fn batch(records: &[(Option<&str>, &str, i64)], headers: &[(&str, &[u8])]) -> Batch {
    let mut batch = Batch::new();
    for (key, value, timestamp) in records {
        batch.push(
            key.map(str::as_bytes),
            value.as_bytes(),
            *timestamp,
            headers,
        );
    }
    batch
}

fn out(key: Option<&str>, value: &str, timestamp: i64, output: usize) -> Out {
    (
        key.map(str::to_owned),
        value.to_owned(),
        timestamp,
        Vec::new(),
        output,
    )
}

#[test]
fn py_enrich_joins_clicks_with_the_latest_profile_and_forgets_removed_users() {
    let mut op = enrich("py-enrich", &[], &["enriched", "invalid"]);
    let users = batch(
        &[
            (Some("u1"), r#"{"name":"Ada","country":"UK"}"#, 1),
            (Some("u2"), r#"{"name":"Bo"}"#, 2),
            (Some("u3"), "not json", 3),
            (None, r#"{"name":"nobody"}"#, 4),
        ],
        &[],
    );
    assert_eq!(
        process(&mut op, USERS, &users),
        [],
        "a table update emits nothing"
    );
    let clicks = batch(
        &[
            (
                Some("u1"),
                r#"{"user":"u1","page":"/","name":"the click's"}"#,
                10,
            ),
            (Some("u3"), r#"{"user":"u3","page":"/a"}"#, 11),
            (Some("u9"), r#"{"user":"u9","page":"/b"}"#, 12),
            (None, r#"{"page":"/c"}"#, 13),
            (Some("u2"), "[1]", 14),
        ],
        &[("trace", b"t1")],
    );
    let trace = vec![("trace".to_owned(), "t1".to_owned())];
    let with_trace = |(key, value, ts, _, output): Out| (key, value, ts, trace.clone(), output);
    assert_eq!(
        process(&mut op, CLICKS, &clicks),
        [
            out(
                Some("u1"),
                r#"{"country":"UK","matched":true,"name":"Ada","page":"/","user":"u1"}"#,
                10,
                0
            ),
            out(
                Some("u3"),
                r#"{"matched":false,"page":"/a","user":"u3"}"#,
                11,
                0
            ),
            out(
                Some("u9"),
                r#"{"matched":false,"page":"/b","user":"u9"}"#,
                12,
                0
            ),
            out(
                None,
                r#"{"matched":true,"name":"nobody","page":"/c"}"#,
                13,
                0
            ),
            out(Some("u2"), "[1]", 14, 1),
        ]
        .map(with_trace)
    );

    // A tombstone removes u1; u2's new profile replaces the old one.
    let updates = batch(
        &[
            (Some("u1"), "", 20),
            (Some("u2"), r#"{"name":"Bea","tier":"gold"}"#, 21),
        ],
        &[],
    );
    assert_eq!(process(&mut op, USERS, &updates), []);
    let clicks = batch(
        &[
            (Some("u1"), r#"{"page":"/d"}"#, 30),
            (Some("u2"), r#"{"page":"/e"}"#, 31),
        ],
        &[],
    );
    assert_eq!(
        process(&mut op, CLICKS, &clicks),
        [
            out(Some("u1"), r#"{"matched":false,"page":"/d"}"#, 30, 0),
            out(
                Some("u2"),
                r#"{"matched":true,"name":"Bea","page":"/e","tier":"gold"}"#,
                31,
                0
            ),
        ]
    );
    assert!(
        outs(&op.on_watermark_emitted(100).unwrap()).is_empty(),
        "enrich fires nothing"
    );
}

#[test]
fn py_enrich_copies_the_fields_it_is_told_and_drops_what_it_is_told() {
    let cfg = [
        ("fields", "name, tier"),
        ("prefix", "user_"),
        ("matched_field", "found"),
        ("unmatched", "drop"),
    ];
    let mut op = enrich("py-enrich", &cfg, &["enriched"]);
    process(
        &mut op,
        USERS,
        &batch(
            &[(Some("u1"), r#"{"name":"Ada","tier":"gold","age":36}"#, 1)],
            &[],
        ),
    );
    let clicks = batch(
        &[
            (Some("u1"), r#"{"page":"/","user_name":"replaced"}"#, 10),
            (Some("u2"), r#"{"page":"/"}"#, 11),
            (Some("u1"), "not json", 12),
        ],
        &[],
    );
    assert_eq!(
        process(&mut op, CLICKS, &clicks),
        [out(
            Some("u1"),
            r#"{"found":true,"page":"/","user_name":"Ada","user_tier":"gold"}"#,
            10,
            0
        )],
        "an unmatched click dropped, and one that is no JSON object too, for want of `invalid`"
    );
}

/// Both plugins refuse these the same way: `(config, inputs, outputs, message)`.
/// A config, inputs, outputs and the refusal they earn.
type Refusal = (&'static [(&'static str, &'static str)], &'static [&'static str], &'static [&'static str], &'static str);

const REFUSALS: [Refusal; 5] = [
    (
        &[],
        &["clicks", "profiles"],
        &["out"],
        "operator needs an input named `users`; its inputs are [clicks, profiles]: name one `users` in the \
         operator's `inputs` in the job file",
    ),
    (
        &[],
        &["clicks", "users", "orders"],
        &["out"],
        "operator was given an input named `orders` it does not read",
    ),
    (
        &[],
        &["clicks", "users"],
        &["invalid", "out"],
        r#"it is named `invalid`, the output for clicks that are not JSON objects; its outputs are ["invalid", "out"]: put another output first"#,
    ),
    (
        &[("unmatched", "maybe")],
        &["clicks", "users"],
        &["out"],
        r#"operator config `unmatched` = "maybe" is not valid"#,
    ),
    (
        &[("fields", " , ")],
        &["clicks", "users"],
        &["out"],
        "operator config `fields` names no field",
    ),
];

#[test]
fn py_enrich_refuses_missing_inputs_and_bad_config_as_enrich_does() {
    for plugin in ["py-enrich", "enrich"] {
        for (cfg, inputs, outputs, message) in REFUSALS {
            let err = start(plugin, cfg, ports(inputs, outputs))
                .err()
                .expect("refused");
            assert!(
                matches!(err, OperatorError::Init { .. }),
                "{plugin}: {err:?}"
            );
            assert!(
                err.to_string().contains(message),
                "{plugin}: `{message}` expected in: {err}"
            );
        }
    }
    let err = start(
        "py-enrich",
        &[("bogus", "1")],
        ports(&["clicks", "users"], &["out"]),
    )
    .err()
    .expect("refused");
    assert!(err.to_string().contains("unknown key `bogus`"), "{err}");
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

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next(from.len() as u64) as usize]
    }
}

/// JSON string bodies both languages must read and write alike: escapes, control
/// characters, non-ASCII, a surrogate pair.
const NAMES: [&str; 9] = [
    "Ada",
    "Zoë",
    r#"a\"b"#,
    r"tab\there",
    r"\u0001ctl",
    "日本",
    r"\ud83d\ude00",
    r"\u00e9t\u00e9",
    r"sl\/ash",
];
const NUMBERS: [&str; 6] = ["2.5", "-0.125", "1.0", "0.1", "100", "-7"];

fn user_key(rng: &mut Rng) -> Option<String> {
    match rng.next(13) {
        12 => None,
        n => Some(format!("u{n}")),
    }
}

/// A batch of the `users` table: profiles (nested objects and all), tombstones, rows
/// that are no JSON object.
fn users(rng: &mut Rng, ts: &mut i64, first: bool) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..if first { 12 } else { 1 + rng.next(5) } {
        *ts += 1;
        let key = user_key(rng);
        let value = match rng.next(20) {
            0..=2 if !first => String::new(),
            3 => rng
                .pick(&[
                    "not json",
                    "[1,2]",
                    r#"{"a":"#,
                    r#""str""#,
                    "NaN",
                    r#"{"x":"\ud800"}"#,
                ])
                .to_owned(),
            n => format!(
                r#"{{"name":"{}","score":{},"tier":"t{n}","address":{{"zip":"{}","city":"C{}"}},"tags":["x",{n}],"ok":true,"none":null}}"#,
                rng.pick(&NAMES),
                rng.pick(&NUMBERS),
                rng.next(100),
                rng.next(5)
            ),
        };
        batch.push(
            key.as_deref().map(str::as_bytes),
            value.as_bytes(),
            *ts,
            &[],
        );
    }
    batch
}

/// A batch of clicks: most JSON objects (some with a field a profile also has), some
/// not objects, not UTF-8 or with a lone surrogate; some with headers.
fn clicks(rng: &mut Rng, ts: &mut i64) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..1 + rng.next(12) {
        *ts += 1 + rng.next(5) as i64;
        let key = user_key(rng);
        let user = key.clone().unwrap_or_default();
        let value: Vec<u8> = match rng.next(20) {
            0 => b"[\"not\",\"an object\"]".to_vec(),
            1 => b"\xff{}".to_vec(),
            2 => br#"{"page":"\udc00"}"#.to_vec(),
            3 => format!(
                r#"{{"user":"{user}","name":"{}","n":{}}}"#,
                rng.pick(&NAMES),
                rng.pick(&NUMBERS)
            )
            .into_bytes(),
            _ => format!(
                r#"{{"user":"{user}","page":"/p/{}","n":{}}}"#,
                rng.next(50),
                rng.pick(&NUMBERS)
            )
            .into_bytes(),
        };
        let trace = format!("t{ts}");
        let headers: &[(&str, &[u8])] = if rng.next(4) == 0 {
            &[("trace", trace.as_bytes())]
        } else {
            &[]
        };
        batch.push(key.as_deref().map(str::as_bytes), &value, *ts, headers);
    }
    batch
}

/// `steps` batches for (input, batch): the table first, then clicks and updates mixed.
fn workload(seed: u64, steps: usize) -> Vec<(u32, Batch)> {
    let (mut rng, mut ts) = (Rng(seed), 1_000_000);
    let mut all = vec![(USERS, users(&mut rng, &mut ts, true))];
    for _ in 1..steps {
        all.push(if rng.next(3) == 0 {
            (USERS, users(&mut rng, &mut ts, false))
        } else {
            (CLICKS, clicks(&mut rng, &mut ts))
        });
    }
    all
}

fn run(
    plugin: &str,
    cfg: &[(&str, &str)],
    outputs: &[&str],
    steps: &[(u32, Batch)],
) -> Vec<Vec<Out>> {
    let mut op = enrich(plugin, cfg, outputs);
    steps
        .iter()
        .map(|(input, batch)| process(&mut op, *input, batch))
        .collect()
}

#[test]
fn py_enrich_emits_what_the_rust_enrich_emits_on_the_same_input() {
    type Setup<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str]);
    let configs: [Setup<'_>; 3] = [
        (&[], &["enriched", "invalid"]),
        (
            &[
                ("fields", "name,address,none"),
                ("prefix", "p_"),
                ("matched_field", "hit"),
            ],
            &["enriched"],
        ),
        (&[("unmatched", "drop")], &["enriched", "audit", "invalid"]),
    ];
    for (seed, (cfg, outputs)) in (0x5eed_0101..).zip(configs) {
        let steps = workload(seed, 80);
        let python = run("py-enrich", cfg, outputs, &steps);
        let rust = run("enrich", cfg, outputs, &steps);
        let records: usize = rust.iter().map(Vec::len).sum();
        let matched = rust
            .iter()
            .flatten()
            .filter(|r| r.1.contains(":true"))
            .count();
        let invalid = rust.iter().flatten().filter(|r| r.4 != 0).count();
        assert!(
            records > 200 && matched > 50,
            "{cfg:?}: {records} records, {matched} matched prove little"
        );
        assert!(
            !outputs.contains(&"invalid") || invalid > 10,
            "{cfg:?}: only {invalid} records to `invalid`"
        );
        for (step, (py, rs)) in python.iter().zip(&rust).enumerate() {
            assert_eq!(
                py, rs,
                "{cfg:?}, step {step}: py-enrich (left) and enrich (right) differ"
            );
        }
    }
}

/// A round cut at `max_bytes`, applied to `image`; returns the keys it held, each once.
fn checkpoint(op: &mut OperatorInstance, max_bytes: u32, image: &mut Image) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    for chunk in round(op, max_bytes) {
        for (key, _) in chunk.iter() {
            assert!(
                keys.insert(key.to_vec()),
                "key {:?} twice in one round",
                text(key)
            );
        }
        apply(image, &chunk);
    }
    keys
}

#[test]
fn py_enrich_restored_every_few_batches_joins_exactly_as_straight_through() {
    let steps = workload(0x5eed_0201, 90);
    let outputs = ["enriched", "invalid"];
    let straight = run("py-enrich", &[], &outputs, &steps);

    let mut op = enrich("py-enrich", &[], &outputs);
    let (mut image, mut restores, mut changed) = (Image::new(), 0, 0);
    let mut resumed = Vec::new();
    for (i, (input, batch)) in steps.iter().enumerate() {
        resumed.push(process(&mut op, *input, batch));
        let keys = checkpoint(&mut op, [1, 64, 4096][i % 3], &mut image);
        if *input == CLICKS {
            assert!(
                keys.is_empty(),
                "step {i}: clicks change no user, yet {keys:?} were snapshotted"
            );
        }
        changed += keys.len();
        if i % 3 == 2 {
            op = enrich("py-enrich", &[], &outputs);
            restore(&mut op, &image, 0);
            assert!(
                checkpoint(&mut op, 4096, &mut Image::new()).is_empty(),
                "restored entries are not changes"
            );
            restores += 1;
        }
    }
    assert!(
        restores > 20 && changed > 40 && !image.is_empty(),
        "{restores} restores, {changed} changed keys"
    );
    for (step, (again, first)) in resumed.iter().zip(&straight).enumerate() {
        assert_eq!(
            again, first,
            "step {step}: restored (left) and straight through (right) differ"
        );
    }
    // One user's update is one entry: the version byte, then the profile in compact JSON.
    process(
        &mut op,
        USERS,
        &batch(&[(Some("u1"), r#"{ "name" : "Ada" }"#, 1)], &[]),
    );
    let mut one = Image::new();
    assert_eq!(checkpoint(&mut op, 4096, &mut one).len(), 1);
    assert_eq!(
        one.get(&b"u1"[..]).map(|v| text(v)),
        Some("\u{1}{\"name\":\"Ada\"}".to_owned())
    );
}

#[test]
fn python_plugins_target_the_world_build_plugins_picks() {
    for plugin in ["py-enrich", "py-total", "py-window-max"] {
        assert_eq!(
            load(plugin).info().world,
            World::V0_3,
            "{plugin} is on weir_sdk"
        );
    }
    assert_eq!(
        load("py-filter").info().world,
        World::V0_2,
        "py-filter implements the 0.2 WIT by hand"
    );
    // On 0.3 a one-input operator still reads batches of its one input, whatever its name.
    let mut total = start(
        "py-total",
        &[("field", "n")],
        ports(&["orders"], &["totals"]),
    )
    .unwrap();
    assert_eq!(
        process(&mut total, 0, &batch(&[(Some("k"), r#"{"n":2}"#, 5)], &[])),
        [out(Some("k"), r#"{"key":"k","total":2}"#, 5, 0)]
    );
}
