//! Plugins written in Python (componentize-py) and JavaScript (componentize-js)
//! load and process batches correctly through the same host API: WASI imports
//! satisfied by the empty sandbox, headers and keys carried through.

use crate::operator_common as common;

use common::{config, load, records};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};

#[test]
fn python_filter_keeps_matching_records_with_their_headers() {
    let plugin = load("py-filter");
    println!("py-filter: {}", plugin.info().compiled);
    let mut op = OperatorInstance::new(
        &plugin,
        Limits::default(),
        config(&[("field", "kind"), ("equals", "click")]),
        "py".into(),
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let mut input = Batch::new();
    input.push(
        Some(b"u1"),
        br#"{"kind":"click","n":1}"#,
        10,
        &[("trace", b"t-1")],
    );
    input.push(Some(b"u2"), br#"{"kind":"view"}"#, 11, &[("trace", b"t-2")]);
    input.push(None, b"not json", 12, &[]);
    input.push(
        Some(b"u3"),
        br#"{"kind":"click","n":2}"#,
        13,
        &[("a", b"1"), ("b", b"2")],
    );

    let out = op.process(&input).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        records(&out),
        [
            (Some("u1".into()), r#"{"kind":"click","n":1}"#.into(), 10),
            (Some("u3".into()), r#"{"kind":"click","n":2}"#.into(), 13),
        ]
    );
    assert_eq!(
        out.get(0).headers().collect::<Vec<_>>(),
        [("trace", &b"t-1"[..])]
    );
    assert_eq!(
        out.get(1).headers().collect::<Vec<_>>(),
        [("a", &b"1"[..]), ("b", &b"2"[..])]
    );
    assert!(op.on_watermark(100).unwrap().is_empty());
    assert!(common::changes(&mut op).is_empty(), "py-filter keeps no state");
    common::restore(&mut op, &common::Image::new(), 100);
}

#[test]
fn javascript_enrich_reshapes_json_values() {
    let plugin = load("js-enrich");
    println!("js-enrich: {}", plugin.info().compiled);
    let cfg = config(&[
        ("rename", "uid:user_id"),
        ("set", r#"{"region":"eu"}"#),
        ("event_time_field", "time"),
    ]);
    let mut op = OperatorInstance::new(&plugin, Limits::default(), cfg, "js".into())
        .unwrap_or_else(|err| panic!("{err}"));
    let mut input = Batch::new();
    input.push(
        Some(b"k"),
        br#"{"uid":7,"x":1}"#,
        1_700_000_000_123,
        &[("h", b"v")],
    );
    input.push(None, b"plain text", 5, &[]);

    let out = op.process(&input).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        records(&out),
        [
            (
                Some("k".into()),
                r#"{"user_id":7,"x":1,"region":"eu","time":"2023-11-14T22:13:20.123Z"}"#.into(),
                1_700_000_000_123
            ),
            (None, "plain text".into(), 5),
        ]
    );
    assert_eq!(out.get(0).headers().collect::<Vec<_>>(), [("h", &b"v"[..])]);
    // Many batches through one instance: no state leaks, no growth.
    for _ in 0..100 {
        assert_eq!(op.process(&input).unwrap().len(), 2);
    }
}
