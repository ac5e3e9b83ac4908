//! py-total, the stateful Python plugin of weir:operator@0.2: its per-key running
//! totals, its incremental snapshot rounds (changed keys only, in chunks within
//! `max-bytes`) and the restores it refuses. `operator_state` proves its restore
//! continues exactly.

use crate::operator_common as common;

use common::{batch, config, load, records, round};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};
use weir::chunk::StateChunk;

/// A state entry as text: the key, and its value (`None` for a removal).
type Entry = (String, Option<String>);

fn entries(chunk: &StateChunk) -> Vec<Entry> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    chunk.iter().map(|(key, value)| (text(key), value.map(text))).collect()
}

/// Packs `(key, value)` pairs (`None`: a removal) into one chunk.
fn chunk(pairs: &[(&[u8], Option<&[u8]>)]) -> StateChunk {
    let mut chunk = StateChunk::default();
    for (key, value) in pairs {
        chunk.push(key, *value);
    }
    chunk
}

fn round_entries(op: &mut OperatorInstance, max_bytes: u32) -> Vec<Entry> {
    round(op, max_bytes).iter().flat_map(entries).collect()
}

fn new(label: &str) -> OperatorInstance {
    OperatorInstance::new(
        &load("py-total"),
        Limits::default(),
        config(&[("field", "amount")]),
        label.to_owned(),
    )
    .unwrap_or_else(|err| panic!("{err}"))
}

fn process(op: &mut OperatorInstance, input: &Batch) -> Vec<(Option<String>, String, i64)> {
    records(&op.process(input).unwrap_or_else(|err| panic!("{err}")))
}

fn entry(key: &str, value: &str) -> Entry {
    (key.to_owned(), Some(value.to_owned()))
}

#[test]
fn python_total_sums_a_field_per_key_and_snapshots_changed_keys() {
    let mut op = new("total");
    let mut input = batch(&[
        (Some("u1"), r#"{"amount":5}"#, 10),
        (Some("u2"), r#"{"amount":2.5}"#, 11),
        (Some("u1"), r#"{"amount":7,"note":"x"}"#, 12),
        (None, r#"{"amount":-3}"#, 13),
        (Some("u3"), "not json", 14),
        (Some("u3"), r#"{"amount":"7"}"#, 15),
        (Some("u3"), r#"{"other":1}"#, 16),
    ]);
    input.push(Some(b"\xffk"), br#"{"amount":1}"#, 17, &[]);
    assert_eq!(
        process(&mut op, &input),
        [
            (Some("u1".into()), r#"{"key":"u1","total":5}"#.into(), 10),
            (Some("u2".into()), r#"{"key":"u2","total":2.5}"#.into(), 11),
            (Some("u1".into()), r#"{"key":"u1","total":12}"#.into(), 12),
            (None, r#"{"key":"","total":-3}"#.into(), 13),
            (
                Some("\u{fffd}k".into()),
                "{\"key\":\"\u{fffd}k\",\"total\":1}".into(),
                17
            ),
        ]
    );
    // A float total stays a float; the empty key is the keyless records' key.
    let more = batch(&[
        (Some("u2"), r#"{"amount":0.5}"#, 20),
        (Some(""), r#"{"amount":4}"#, 21),
    ]);
    assert_eq!(
        process(&mut op, &more),
        [
            (Some("u2".into()), r#"{"key":"u2","total":3.0}"#.into(), 20),
            (Some("".into()), r#"{"key":"","total":1}"#.into(), 21),
        ]
    );

    // Every changed key once, sorted, as 0x01 + the total; 8 bytes make 3 chunks.
    let chunks = round(&mut op, 8);
    assert_eq!(chunks.len(), 3);
    assert_eq!(
        chunks.iter().flat_map(entries).collect::<Vec<_>>(),
        [
            entry("", "\x011"),
            entry("u1", "\x0112"),
            entry("u2", "\x013.0"),
            entry("\u{fffd}k", "\x011"),
        ]
    );
    // The next round holds only what changed since.
    assert!(round_entries(&mut op, 8).is_empty());
    process(&mut op, &batch(&[(Some("u1"), r#"{"amount":1}"#, 30)]));
    assert_eq!(round_entries(&mut op, 0), [entry("u1", "\x0113")]);
}

#[test]
fn python_total_refuses_unknown_config_and_bad_restores() {
    let err = OperatorInstance::new(
        &load("py-total"),
        Limits::default(),
        config(&[("field", "amount"), ("bogus", "1")]),
        "total".into(),
    )
    .err()
    .expect("an unknown config key is refused");
    assert!(err.to_string().contains("unknown key `bogus`"), "{err}");

    for (bad, why) in [
        (chunk(&[(b"k", None)]), "removals"),
        (
            chunk(&[(b"k", Some(b"\x017")), (b"k", Some(b"\x018"))]),
            "restored already",
        ),
        (chunk(&[(b"k", Some(b"\x02{}"))]), "encoding version 1"),
        (chunk(&[(b"k", Some(b"\x01true"))]), "not a version 1 total"),
    ] {
        let err = new("total").restore(&bad).expect_err(why);
        let message = err.to_string();
        assert!(
            message.contains("py-total") && message.contains(why),
            "{message}"
        );
    }
}
