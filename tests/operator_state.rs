//! Checkpoints carry an operator's state exactly: for each stateful example
//! plugin, running steps A then B in one instance gives the same output as running
//! A with a checkpoint after every step (each one only the keys changed since the
//! last), restoring the accumulated state into a new instance and running B there.

use crate::operator_common as common;

use common::{Image, apply, batch, changes, config, load, records, restore};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};

/// One step of input: a batch to process or a watermark to advance to.
enum Step {
    Process(Batch),
    Watermark(i64),
}

fn run(
    instance: &mut OperatorInstance,
    steps: &[Step],
    output: &mut Vec<(Option<String>, String, i64)>,
) {
    for step in steps {
        let out = match step {
            Step::Process(batch) => instance.process(batch),
            Step::Watermark(watermark) => instance.on_watermark(*watermark),
        };
        output.extend(records(&out.unwrap_or_else(|err| panic!("{err}"))));
    }
}

/// Runs `first` then `second` straight through, and again with incremental
/// checkpoints through `first` and a restore into a new instance before `second`;
/// both must emit the same records.
fn assert_snapshot_is_transparent(
    plugin: &str,
    cfg: &[(&str, &str)],
    first: &[Step],
    second: &[Step],
) {
    let plugin = load(plugin);
    let new = |label: &str| {
        OperatorInstance::new(&plugin, Limits::default(), config(cfg), label.to_owned())
            .unwrap_or_else(|err| panic!("{err}"))
    };

    let mut straight = Vec::new();
    let mut instance = new("straight");
    run(&mut instance, first, &mut straight);
    run(&mut instance, second, &mut straight);

    let mut resumed = Vec::new();
    let mut before = new("before");
    let mut image = Image::new();
    let mut watermark = i64::MIN;
    for step in first {
        run(&mut before, std::slice::from_ref(step), &mut resumed);
        apply(&mut image, &changes(&mut before));
        if let Step::Watermark(w) = step {
            watermark = *w;
        }
    }
    drop(before);
    let mut after = new("after");
    restore(&mut after, &image, watermark);
    assert!(changes(&mut after).is_empty(), "restored entries are not changes");
    run(&mut after, second, &mut resumed);

    assert!(
        !straight.is_empty(),
        "the input must make {} emit something",
        plugin.path().display()
    );
    assert_eq!(
        straight,
        resumed,
        "output of {} with and without a restore",
        plugin.path().display()
    );
}

#[test]
fn window_count_snapshot_and_restore_continue_exactly() {
    let first = [
        Step::Process(batch(&[
            (Some("a"), "x", 100),
            (Some("b"), "x", 200),
            (None, "x", 300),
            (Some("a"), "x", 1_100),
        ])),
        // Fires [0, 1000); the window [1000, 2000) stays open across the snapshot.
        Step::Watermark(1_000),
        Step::Process(batch(&[(Some("b"), "x", 1_500), (Some("a"), "x", 1_999)])),
    ];
    let second = [
        Step::Process(batch(&[
            (Some("a"), "x", 1_200),
            (Some("c"), "x", 2_500),
            (Some("a"), "late", 10),
        ])),
        Step::Watermark(2_000),
        Step::Process(batch(&[(Some("c"), "x", 2_600)])),
        Step::Watermark(5_000),
    ];
    // And its ports to C and Go.
    for plugin in ["window-count", "c-window-count", "go-window-count"] {
        assert_snapshot_is_transparent(plugin, &[("window_ms", "1000")], &first, &second);
    }
}

#[test]
fn session_sum_snapshot_and_restore_continue_exactly() {
    let first = [
        Step::Process(batch(&[
            (Some("u1"), r#"{"amount":5}"#, 1_000),
            (Some("u2"), r#"{"amount":2.5}"#, 1_100),
            (Some("u1"), r#"{"amount":7}"#, 1_300),
            (Some("u3"), "not json", 1_400),
        ])),
        // u1's session [1000, 1800) and u2's [1100, 1600) stay open: nothing fires yet.
        Step::Watermark(1_500),
    ];
    let second = [
        // Extends u1's session across the snapshot; u2's closes at 1600.
        Step::Process(batch(&[
            (Some("u1"), r#"{"amount":1}"#, 1_700),
            (Some("u2"), r#"{"amount":4}"#, 3_000),
        ])),
        Step::Watermark(2_500),
        Step::Process(batch(&[(None, r#"{"amount":-3}"#, 3_100)])),
        Step::Watermark(10_000),
    ];
    assert_snapshot_is_transparent(
        "session-sum",
        &[("field", "amount"), ("gap_ms", "500")],
        &first,
        &second,
    );
}

#[test]
fn py_total_snapshot_and_restore_continue_exactly() {
    let first = [
        Step::Process(batch(&[
            (Some("a"), r#"{"n":2}"#, 1),
            (Some("b"), r#"{"n":5}"#, 2),
            (None, r#"{"n":1}"#, 3),
        ])),
        Step::Process(batch(&[(Some("a"), r#"{"n":3}"#, 4), (Some("c"), "not json", 5)])),
    ];
    let second = [Step::Process(batch(&[
        (Some("a"), r#"{"n":10}"#, 6),
        (Some("b"), r#"{"n":0.5}"#, 7),
        (None, r#"{"n":1}"#, 8),
    ]))];
    assert_snapshot_is_transparent("py-total", &[("field", "n")], &first, &second);
}
