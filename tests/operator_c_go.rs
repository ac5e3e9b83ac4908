//! The C and Go window counts (plugins/c-window-count, plugins/go-window-count, built
//! by clang and go and wrapped by weir-guest) are the Rust window-count in other
//! languages: on the same input, with watermarks, late records and awkward keys, they
//! emit exactly its records. Their snapshot rounds hold each changed key once, in
//! chunks within max-bytes, and they refuse state they cannot restore.

use crate::operator_common as common;

use common::{Image, apply, changes, config, load, records, restore, round};
use weir::batch::Batch;
use weir::operator::{Limits, OperatorInstance};
use weir::chunk::StateChunk;

const PORTS: [&str; 2] = ["c-window-count", "go-window-count"];

fn new(plugin: &str, window_ms: &str) -> OperatorInstance {
    OperatorInstance::new(
        &load(plugin),
        Limits::default(),
        config(&[("window_ms", window_ms)]),
        plugin.to_owned(),
    )
    .unwrap_or_else(|err| panic!("{plugin}: {err}"))
}

/// A deterministic stream: keys that need JSON escaping or are not UTF-8, keyless
/// records, timestamps out of order (some late).
fn input(seed: u64, batches: usize) -> Vec<(Batch, i64)> {
    let keys: [Option<&[u8]>; 12] = [
        Some(b"alice"),
        Some(b"bob"),
        Some(b""),
        None,
        Some(b"q\"uote\\back"),
        Some(b"\n\t\x01\x1f\x7f"),
        Some(b"bad \xff utf8"),
        Some(b"cut \xe2\x82"),
        Some(b"\xf0\x9f\x98\x80 emoji"),
        Some(b"\xed\xa0\x80 surrogate"),
        Some(b"\xc0\xaf overlong"),
        Some(b"zed"),
    ];
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut out = Vec::new();
    let mut now = 10_000i64;
    for _ in 0..batches {
        let mut batch = Batch::new();
        for _ in 0..(next() % 40) {
            let key = keys[next() as usize % keys.len()];
            // Mostly near `now`, sometimes far behind it (late once the watermark passed).
            let timestamp = now - (next() % 1_500) as i64 - if next() % 10 == 0 { 4_000 } else { 0 };
            batch.push(key, b"v", timestamp, &[]);
        }
        now += (next() % 700) as i64;
        out.push((batch, now - 1_000));
    }
    out
}

/// Runs `plugin` over `steps` (each a batch, then a watermark), checkpointing every
/// `restart_every` steps into an image and restoring it into a new instance.
fn run(plugin: &str, steps: &[(Batch, i64)], restart_every: usize) -> Vec<(Option<String>, String, i64)> {
    let mut instance = new(plugin, "1000");
    let mut image = Image::new();
    let mut watermark = i64::MIN;
    let mut output = Vec::new();
    for (at, (batch, to)) in steps.iter().enumerate() {
        output.extend(records(&instance.process(batch).unwrap_or_else(|err| panic!("{plugin}: {err}"))));
        output.extend(records(&instance.on_watermark(*to).unwrap_or_else(|err| panic!("{plugin}: {err}"))));
        watermark = watermark.max(*to);
        apply(&mut image, &changes(&mut instance));
        if restart_every > 0 && at % restart_every == restart_every - 1 {
            instance = new(plugin, "1000");
            restore(&mut instance, &image, watermark);
        }
    }
    output.extend(records(&instance.on_watermark(i64::MAX).unwrap()));
    output
}

#[test]
fn c_and_go_window_counts_emit_what_the_rust_one_emits() {
    let steps = input(42, 300);
    let reference = run("window-count", &steps, 0);
    assert!(reference.len() > 500, "the input fires too few windows: {}", reference.len());
    assert!(reference.iter().any(|(_, value, _)| value.contains('\u{fffd}')));
    for plugin in PORTS {
        assert_eq!(run(plugin, &steps, 0), reference, "{plugin} straight through");
        // Restarted from its own checkpoints every 7 steps, it still emits the same.
        assert_eq!(run(plugin, &steps, 7), reference, "{plugin} restored every 7 steps");
    }
}

#[test]
fn c_and_go_snapshot_rounds_hold_changed_keys_once_and_removals() {
    for plugin in PORTS {
        let mut op = new(plugin, "1000");
        let batch = common::batch(&[
            (Some("a"), "x", 10),
            (Some("b"), "x", 20),
            (Some("a"), "x", 1_500),
            (Some("c"), "x", 30),
        ]);
        op.process(&batch).unwrap();
        // 3 keys of 1 + 9 + 16·windows bytes; a 30-byte budget makes 3 chunks.
        let chunks = round(&mut op, 30);
        let keys: Vec<_> = chunks.iter().flat_map(|c| c.iter().map(|(k, _)| k.to_vec())).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], "{plugin}: {keys:?}");
        assert_eq!(keys.len(), 3, "{plugin}: each key once");
        assert!(chunks.len() >= 2, "{plugin}: max-bytes splits the round");
        assert!(round(&mut op, 4096).is_empty(), "{plugin}: nothing changed since");

        // Firing [0, 1000) empties b and c (removals) and changes a (one window left).
        assert_eq!(records(&op.on_watermark(1_000).unwrap()).len(), 3);
        let mut after: Vec<_> = round(&mut op, 4096)
            .iter()
            .flat_map(|c| c.iter().map(|(k, v)| (k.to_vec(), v.is_none())).collect::<Vec<_>>())
            .collect();
        after.sort();
        assert_eq!(
            after,
            [(b"a".to_vec(), false), (b"b".to_vec(), true), (b"c".to_vec(), true)],
            "{plugin}"
        );
        // A key born and emptied between two snapshots is not reported at all.
        op.process(&common::batch(&[(Some("d"), "x", 1_200)])).unwrap();
        op.on_watermark(2_000).unwrap();
        let last: Vec<_> = round(&mut op, 4096).iter().flat_map(|c| c.iter().map(|(k, _)| k.to_vec()).collect::<Vec<_>>()).collect();
        assert_eq!(last, [b"a".to_vec()], "{plugin}: a is removed, d never stored");
    }
}

#[test]
fn c_and_go_refuse_bad_config_and_state_they_cannot_restore() {
    for plugin in PORTS {
        // Surrounding whitespace is ignored, as the Rust SDK does.
        OperatorInstance::new(&load(plugin), Limits::default(), config(&[("window_ms", " 1000 ")]), plugin.into())
            .unwrap_or_else(|err| panic!("{plugin}: {err}"));
        for (cfg, why) in [
            (vec![("window_ms", "0")], "window_ms"),
            (vec![("window_ms", "12x")], "window_ms"),
            (vec![("window_ms", "1000"), ("bogus", "1")], "unknown key `bogus`"),
            (vec![], "`window_ms` is missing"),
        ] {
            let err = OperatorInstance::new(&load(plugin), Limits::default(), config(&cfg), plugin.into())
                .err()
                .unwrap_or_else(|| panic!("{plugin} accepted {cfg:?}"));
            assert!(err.to_string().contains(why), "{plugin}: {err}");
        }

        let mut written = new(plugin, "500");
        written.process(&common::batch(&[(Some("k"), "x", 10)])).unwrap();
        let other_size = changes(&mut written);
        let chunk = |pairs: &[(&[u8], Option<&[u8]>)]| {
            let mut chunk = StateChunk::default();
            for (key, value) in pairs {
                chunk.push(key, *value);
            }
            chunk
        };
        let good = {
            let mut op = new(plugin, "1000");
            op.process(&common::batch(&[(Some("k"), "x", 10)])).unwrap();
            changes(&mut op)
        };
        let good_value = good.iter().next().unwrap().1.unwrap().to_vec();
        let mut bad_version = good_value.clone();
        bad_version[0] = 9;
        let mut same_window_twice = good_value.clone();
        same_window_twice.extend_from_slice(&good_value[9..]);
        for (bad, why) in [
            (other_size, "window_ms = 500"),
            (chunk(&[(b"k", None)]), "removals"),
            (chunk(&[(b"k", Some(&bad_version))]), "state version 1"),
            (chunk(&[(b"k", Some(&good_value[..12]))]), "12 bytes"),
            (chunk(&[(b"k", Some(&good_value)), (b"k", Some(&good_value))]), "a key twice"),
            (chunk(&[(b"k", Some(&same_window_twice))]), "a window twice"),
        ] {
            let err = new(plugin, "1000").restore(&bad).expect_err(why);
            assert!(err.to_string().contains(why), "{plugin}: {err}");
        }
    }
}

/// Go's collector must never run, nor pace its scavenger by the clock, while the host
/// allocates a call's arguments (`cabi_realloc` may not call imports): thousands of
/// large batches over many keys make collections start and end at every point of the
/// call cycle.
#[test]
fn go_survives_collections_at_every_point_of_the_call_cycle() {
    let mut op = new("go-window-count", "1000");
    let value = vec![b'v'; 500];
    let mut fired = 0;
    for step in 0..1_200i64 {
        let mut batch = Batch::new();
        for i in 0..(200 + step % 300) {
            let key = format!("key-{}", (step * 7919 + i * 104_729) % 50_000);
            batch.push(Some(key.as_bytes()), &value, step * 10 + i % 10, &[]);
        }
        op.process(&batch).unwrap_or_else(|err| panic!("batch {step}: {err}"));
        fired += op.on_watermark(step * 10 - 2_000).unwrap_or_else(|err| panic!("watermark {step}: {err}")).len();
        if step % 50 == 0 {
            changes(&mut op);
        }
    }
    assert!(fired > 5_000, "{fired} windows fired");
}
