//! Window helpers against a brute-force reference, with incremental snapshots taken
//! and restored at random points: the fired output must not depend on them.

use serde::{Deserialize, Serialize};

use super::{Merge, SessionWindows, SlidingWindows, TumblingWindows, Window};
use crate::packed::StateChunk;
use crate::snapshot;
use crate::state::{Changes, Drained, KeyedState, StateImage};

type Fired = Vec<(Window, Vec<u8>, u64)>;

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Count(u64);

impl Merge for Count {
    fn merge(&mut self, later: Self) {
        self.0 += later.0;
    }
}

/// A small deterministic generator, so failures reproduce.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// One snapshot round, in small chunks: the keys changed since the last, sorted.
fn changes<W: KeyedState>(windows: &mut W) -> StateChunk {
    let mut entries = Vec::new();
    loop {
        let mut changes = Changes::new(1, 64);
        let drained = windows.drain_changes(&mut changes).unwrap();
        let chunk = changes.into_chunk();
        for (key, value) in chunk.iter().map(Result::unwrap) {
            entries.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        }
        if drained == Drained::All {
            break;
        }
        assert!(chunk.data.len() <= 64 || chunk.len() == 1, "{} bytes", chunk.data.len());
    }
    entries.sort();
    assert!(entries.windows(2).all(|pair| pair[0].0 != pair[1].0), "a key comes twice in one round: {entries:?}");
    let mut all = StateChunk::default();
    for (key, value) in &entries {
        all.push(key, value.as_deref());
    }
    all
}

/// A fresh `W` with every entry of `image` restored at `watermark`.
fn restore<W: KeyedState>(mut fresh: W, image: &StateImage, watermark: i64) -> W {
    for (key, value) in &image.entries {
        let entry = snapshot::decode_body(snapshot::parse(value).unwrap().body).unwrap();
        fresh.restore_entry(key, entry).unwrap();
    }
    fresh.restored(watermark).unwrap();
    fresh
}

/// The keys of [`stream`]: empty, short, and either side of the 16 bytes a window's slot
/// holds itself, alike in their first 8 or 16 bytes.
const STREAM_KEYS: [&str; 8] = [
    "",
    "k1",
    "k2",
    "key-of-16-bytes1",
    "key-of-16-bytes2",
    "key-of-16-bytes1+",
    "key-of-16-bytes1-",
    "a key of more than thirty-two bytes",
];

/// Records (key, ts) with bounded disorder: each is at most `disorder` ms behind the
/// highest timestamp so far, so none is late for watermark = max - disorder.
fn stream(seed: u64, records: usize, disorder: i64) -> Vec<(Vec<u8>, i64)> {
    let mut rng = Lcg(seed);
    let mut max = -5_000i64;
    (0..records)
        .map(|_| {
            max += rng.below(40) as i64;
            let ts = max - rng.below(disorder as u64 + 1) as i64;
            let key = STREAM_KEYS[rng.below(STREAM_KEYS.len() as u64) as usize].as_bytes().to_vec();
            (key, ts)
        })
        .collect()
}

/// Feeds `stream` in random batches and fires after each; now and then it takes a
/// checkpoint (the changes since the last, applied to the image of the state) and
/// sometimes replaces the windows by a fresh instance restored from that image.
/// Returns everything fired, in order.
fn drive<W: KeyedState>(
    make: impl Fn() -> W,
    stream: &[(Vec<u8>, i64)],
    disorder: i64,
    seed: u64,
    mut add: impl FnMut(&mut W, &[u8], i64),
    mut fire: impl FnMut(&mut W, i64, &mut Fired),
) -> Fired {
    let mut rng = Lcg(seed);
    let mut windows = make();
    let mut image = StateImage::default();
    let mut fired = Vec::new();
    let mut max = i64::MIN;
    let mut at = 0;
    while at < stream.len() {
        let end = (at + 1 + rng.below(20) as usize).min(stream.len());
        for (key, ts) in &stream[at..end] {
            add(&mut windows, key, *ts);
            max = max.max(*ts);
        }
        at = end;
        fire(&mut windows, max - disorder, &mut fired);
        match rng.below(6) {
            0 | 1 => image.apply(&changes(&mut windows)).unwrap(),
            2 => {
                image.apply(&changes(&mut windows)).unwrap();
                windows = restore(make(), &image, max - disorder);
            }
            _ => {}
        }
    }
    fire(&mut windows, i64::MAX, &mut fired);
    fired
}

fn sorted(mut fired: Fired) -> Fired {
    fired.sort_by(|a, b| (a.0.end, &a.1, a.0.start).cmp(&(b.0.end, &b.1, b.0.start)));
    fired
}

#[test]
fn tumbling_matches_reference_across_snapshots() {
    for seed in 1..20 {
        let records = stream(seed, 500, 300);
        let fired = drive(
            || TumblingWindows::<u64>::new(250).unwrap(),
            &records,
            300,
            seed,
            |w, key, ts| *w.accumulator(key, ts).expect("no record is late") += 1,
            |w, wm, out| w.fire(wm, |win, key, n| out.push((win, key.to_vec(), n))),
        );
        let mut reference = std::collections::BTreeMap::new();
        for (key, ts) in &records {
            let start = ts - ts.rem_euclid(250);
            *reference.entry((start, key.clone())).or_insert(0) += 1;
        }
        let reference: Fired = reference
            .into_iter()
            .map(|((start, key), n)| {
                (
                    Window {
                        start,
                        end: start + 250,
                    },
                    key,
                    n,
                )
            })
            .collect();
        assert_eq!(fired, sorted(reference), "seed {seed}");
    }
}

#[test]
fn sliding_matches_reference_across_snapshots() {
    for (size, slide) in [(300, 100), (250, 100), (100, 100)] {
        for seed in 1..10 {
            let records = stream(seed, 400, 200);
            let fired = drive(
                || SlidingWindows::<u64>::new(size, slide).unwrap(),
                &records,
                200,
                seed,
                |w, key, ts| assert!(w.update(key, ts, |_, n| *n += 1) > 0),
                |w, wm, out| w.fire(wm, |win, key, n| out.push((win, key.to_vec(), n))),
            );
            let mut reference = std::collections::BTreeMap::new();
            for (key, ts) in &records {
                let first = (ts - size + 1).div_euclid(slide) * slide;
                let first = if first + size <= *ts {
                    first + slide
                } else {
                    first
                };
                let mut start = first;
                while start <= *ts {
                    if start + size > *ts {
                        *reference.entry((start, key.clone())).or_insert(0) += 1;
                    }
                    start += slide;
                }
            }
            let reference: Fired = reference
                .into_iter()
                .map(|((start, key), n)| {
                    (
                        Window {
                            start,
                            end: start + size,
                        },
                        key,
                        n,
                    )
                })
                .collect();
            assert_eq!(
                fired,
                sorted(reference),
                "size {size} slide {slide} seed {seed}"
            );
        }
    }
}

#[test]
fn sessions_match_reference_across_snapshots() {
    for gap in [1, 30, 120] {
        for seed in 1..15 {
            let records = stream(seed, 400, 150);
            let fired = drive(
                || SessionWindows::<Count>::new(gap).unwrap(),
                &records,
                150,
                seed,
                |w, key, ts| assert!(w.update(key, ts, |c| c.0 += 1), "no record is late"),
                |w, wm, out| w.fire(wm, |win, key, c| out.push((win, key.to_vec(), c.0))),
            );
            let mut per_key = std::collections::BTreeMap::<Vec<u8>, Vec<i64>>::new();
            for (key, ts) in &records {
                per_key.entry(key.clone()).or_default().push(*ts);
            }
            let mut reference = Vec::new();
            for (key, mut times) in per_key {
                times.sort();
                let (mut start, mut last, mut n) = (times[0], times[0], 0);
                for ts in times {
                    if ts - last > gap {
                        reference.push((
                            Window {
                                start,
                                end: last + gap,
                            },
                            key.clone(),
                            n,
                        ));
                        (start, n) = (ts, 0);
                    }
                    last = ts;
                    n += 1;
                }
                reference.push((
                    Window {
                        start,
                        end: last + gap,
                    },
                    key,
                    n,
                ));
            }
            assert_eq!(fired, sorted(reference), "gap {gap} seed {seed}");
        }
    }
}

#[test]
fn tumbling_aligns_negative_times_and_drops_late_records() {
    let mut w = TumblingWindows::<u64>::new(10).unwrap();
    assert_eq!(w.window_of(-1), Window { start: -10, end: 0 });
    assert_eq!(w.window_of(0), Window { start: 0, end: 10 });
    *w.accumulator(b"b", 9).unwrap() += 1;
    *w.accumulator(b"a", 5).unwrap() += 1;
    *w.accumulator(b"a", -3).unwrap() += 1;
    let mut fired = Vec::new();
    w.fire(9, |win, key, n| fired.push((win.start, key.to_vec(), n)));
    assert_eq!(
        fired,
        [(-10, b"a".to_vec(), 1)],
        "window [0, 10) is not complete at 9"
    );
    w.fire(10, |win, key, n| fired.push((win.start, key.to_vec(), n)));
    assert_eq!(fired[1..], [(0, b"a".to_vec(), 1), (0, b"b".to_vec(), 1)]);
    assert!(w.accumulator(b"a", 9).is_none());
    assert_eq!(w.late_records(), 1);
    assert_eq!(w.open(), 0);
    assert!(TumblingWindows::<u64>::new(0).is_err());
}

#[test]
fn changes_are_canonical_whatever_the_insertion_order() {
    let mut forward = TumblingWindows::<u64>::new(100).unwrap();
    let mut backward = TumblingWindows::<u64>::new(100).unwrap();
    let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("key-{i}").into_bytes()).collect();
    for (i, key) in keys.iter().enumerate() {
        *forward.accumulator(key, i as i64 * 7).unwrap() += 1;
    }
    for (i, key) in keys.iter().enumerate().rev() {
        *backward.accumulator(key, i as i64 * 7).unwrap() += 1;
    }
    assert_eq!(changes(&mut forward), changes(&mut backward));

    let mut forward = SessionWindows::<Count>::new(10).unwrap();
    let mut backward = SessionWindows::<Count>::new(10).unwrap();
    for key in &keys {
        forward.update(key, 0, |c| c.0 += 1);
    }
    for key in keys.iter().rev() {
        backward.update(key, 0, |c| c.0 += 1);
    }
    assert_eq!(changes(&mut forward), changes(&mut backward));
}

#[test]
fn sliding_windows_of_a_record() {
    let w = SlidingWindows::<u64>::new(10, 3).unwrap();
    let starts: Vec<i64> = w.windows_of(7).map(|w| w.start).collect();
    assert_eq!(starts, [0, 3, 6]);
    let starts: Vec<i64> = w.windows_of(-1).map(|w| w.start).collect();
    assert_eq!(starts, [-9, -6, -3]);
    assert!(SlidingWindows::<u64>::new(10, 11).is_err());
    assert!(
        SlidingWindows::<u64>::new(10_000, 1).is_err(),
        "10000 windows per record"
    );
}

#[test]
fn sliding_updates_only_windows_that_have_not_fired() {
    let mut w = SlidingWindows::<u64>::new(10, 5).unwrap();
    w.fire(10, |_, _, _| {});
    assert_eq!(
        w.update(b"k", 7, |_, n| *n += 1),
        1,
        "[0, 10) fired, [5, 15) open"
    );
    assert_eq!(w.update(b"k", 4, |_, n| *n += 1), 0);
    assert_eq!(w.late_records(), 1);
}

#[test]
fn sessions_merge_when_a_record_bridges_them() {
    let mut s = SessionWindows::<Count>::new(10).unwrap();
    s.update(b"k", 0, |c| c.0 += 1);
    s.update(b"k", 30, |c| c.0 += 1);
    s.update(b"k", 60, |c| c.0 += 1);
    assert_eq!(s.open(), 3);
    s.update(b"k", 15, |c| c.0 += 1); // [15, 25) touches neither [0, 10) nor [30, 40)
    assert_eq!(s.open(), 4);
    s.update(b"k", 20, |c| c.0 += 1); // [20, 30) touches [15, 25) and [30, 40)
    assert_eq!(s.open(), 3);
    s.update(b"k", 10, |c| c.0 += 1); // [10, 20) touches [0, 10) and [15, 40)
    assert_eq!(s.open(), 2);
    let mut fired = Vec::new();
    s.fire(i64::MAX, |win, _, c| fired.push((win.start, win.end, c.0)));
    assert_eq!(fired, [(0, 40, 5), (60, 70, 1)]);
}

#[test]
fn session_lateness_depends_on_merging() {
    let mut s = SessionWindows::<Count>::new(10).unwrap();
    s.update(b"k", 100, |c| c.0 += 1);
    s.fire(105, |_, _, _| panic!("[100, 110) is open"));
    assert!(
        s.update(b"k", 91, |c| c.0 += 1),
        "[91, 101) joins the open session"
    );
    assert!(
        !s.update(b"k", 50, |c| c.0 += 1),
        "[50, 60) ended before 105"
    );
    assert!(!s.update(b"other", 80, |c| c.0 += 1));
    assert_eq!(s.late_records(), 2);
    let mut fired = Vec::new();
    s.fire(110, |win, _, c| fired.push((win.start, win.end, c.0)));
    assert_eq!(fired, [(91, 110, 2)]);
    assert!(SessionWindows::<Count>::new(0).is_err());
}

#[test]
fn fired_windows_come_by_end_then_key() {
    let mut s = SessionWindows::<Count>::new(10).unwrap();
    for (key, ts) in [(&b"b"[..], 0), (b"a", 5), (b"c", 0), (b"a", 20)] {
        s.update(key, ts, |c| c.0 += 1);
    }
    let mut fired = Vec::new();
    s.fire(100, |win, key, _| fired.push((win.end, key.to_vec())));
    assert_eq!(
        fired,
        [
            (10, b"b".to_vec()),
            (10, b"c".to_vec()),
            (15, b"a".to_vec()),
            (30, b"a".to_vec())
        ]
    );
}

#[test]
fn a_round_holds_the_changed_keys_only_and_fired_keys_as_removals() {
    let mut w = TumblingWindows::<u64>::new(100).unwrap();
    for key in [&b"a"[..], b"b", b"c"] {
        *w.accumulator(key, 10).unwrap() += 1;
    }
    *w.accumulator(b"a", 150).unwrap() += 1;
    assert_eq!(changes(&mut w).len(), 3);
    assert!(changes(&mut w).is_empty(), "nothing changed since");

    *w.accumulator(b"b", 20).unwrap() += 1;
    let round = changes(&mut w);
    let keys: Vec<_> = round.iter().map(|e| e.unwrap().0.to_vec()).collect();
    assert_eq!(keys, [b"b".to_vec()]);

    w.fire(100, |_, _, _| {});
    let round = changes(&mut w);
    let entries: Vec<_> = round
        .iter()
        .map(|e| e.unwrap())
        .map(|(k, v)| (k.to_vec(), v.is_some()))
        .collect();
    // `a` keeps its window [100, 200); `b` and `c` have none left.
    assert_eq!(
        entries,
        [(b"a".to_vec(), true), (b"b".to_vec(), false), (b"c".to_vec(), false)]
    );
}

#[test]
fn a_round_holds_each_key_once_whatever_windows_noted_it() {
    let mut w = TumblingWindows::<u64>::new(100).unwrap();
    for start in [0, 100, 200, 300] {
        *w.accumulator(b"k", start + 5).unwrap() += 1;
    }
    *w.accumulator(b"only-first", 5).unwrap() += 1;
    assert_eq!(changes(&mut w).len(), 2, "noted in four windows, each key once");

    // Two windows fire together, a third changes: `k` is fired twice and noted once.
    *w.accumulator(b"k", 205).unwrap() += 1;
    w.fire(200, |_, _, _| {});
    let round = changes(&mut w);
    let entries: Vec<_> = round.iter().map(|e| e.unwrap()).map(|(k, v)| (k.to_vec(), v.is_some())).collect();
    assert_eq!(entries, [(b"k".to_vec(), true), (b"only-first".to_vec(), false)]);

    // A change in a window noted in an earlier round counts again in the next.
    *w.accumulator(b"k", 305).unwrap() += 1;
    assert_eq!(changes(&mut w).len(), 1);
    assert!(changes(&mut w).is_empty(), "nothing changed since");
}

/// Each key's count in one window, as a round's entries hold it.
fn counts(round: &StateChunk) -> Vec<(String, u64)> {
    round
        .iter()
        .map(|entry| entry.unwrap())
        .map(|(key, value)| {
            let entry = snapshot::parse(value.expect("not a removal")).unwrap();
            let windows: super::WindowsEntry<u64> = snapshot::decode_body(entry.body).unwrap();
            assert_eq!(windows.windows.len(), 1, "one window open");
            (String::from_utf8(key.to_vec()).unwrap(), windows.windows[0].1)
        })
        .collect()
}

#[test]
fn a_round_of_one_window_hands_over_what_changed_whether_it_walks_the_window_or_not() {
    let mut w = TumblingWindows::<u64>::new(1000).unwrap();
    let key = |i: u32| format!("k{i:03}");
    for i in 0..100 {
        *w.accumulator(key(i).as_bytes(), 5).unwrap() += 1;
    }
    // Every slot changed, then half of them: the round walks the window's table, in
    // chunks of 64 bytes, so it stops and goes on many times.
    assert_eq!(counts(&changes(&mut w)), (0..100).map(|i| (key(i), 1)).collect::<Vec<_>>());
    for i in 0..50 {
        *w.accumulator(key(i * 2).as_bytes(), 6).unwrap() += 1;
    }
    assert_eq!(counts(&changes(&mut w)), (0..50).map(|i| (key(i * 2), 2)).collect::<Vec<_>>());
    // Two of a hundred: the round looks the keys up.
    for i in [3, 7] {
        *w.accumulator(key(i).as_bytes(), 7).unwrap() += 1;
    }
    assert_eq!(counts(&changes(&mut w)), [(key(3), 2), (key(7), 2)]);
    assert!(changes(&mut w).is_empty(), "nothing changed since");
}

#[test]
fn a_restore_refuses_another_window_size_slide_or_gap() {
    let mut image = StateImage::default();
    let mut w = TumblingWindows::<u64>::new(100).unwrap();
    *w.accumulator(b"k", 5).unwrap() += 1;
    image.apply(&changes(&mut w)).unwrap();
    let (key, value) = image.entries.iter().next().unwrap();
    let entry = snapshot::decode_body(snapshot::parse(value).unwrap().body).unwrap();
    let error = TumblingWindows::<u64>::new(200)
        .unwrap()
        .restore_entry(key, entry)
        .unwrap_err();
    assert!(error.message().contains("100 ms windows"), "{error}");

    let mut w = SlidingWindows::<u64>::new(100, 50).unwrap();
    w.update(b"k", 5, |_, n| *n += 1);
    let mut image = StateImage::default();
    image.apply(&changes(&mut w)).unwrap();
    let value = image.entries.values().next().unwrap();
    let entry = snapshot::decode_body(snapshot::parse(value).unwrap().body).unwrap();
    let error = SlidingWindows::<u64>::new(100, 40)
        .unwrap()
        .restore_entry(b"k", entry)
        .unwrap_err();
    assert!(error.message().contains("sliding every 40 ms"), "{error}");

    let mut s = SessionWindows::<Count>::new(10).unwrap();
    s.update(b"k", 0, |c| c.0 += 1);
    let mut image = StateImage::default();
    image.apply(&changes(&mut s)).unwrap();
    let value = image.entries.values().next().unwrap();
    let entry = snapshot::decode_body(snapshot::parse(value).unwrap().body).unwrap();
    let error = SessionWindows::<Count>::new(20)
        .unwrap()
        .restore_entry(b"k", entry)
        .unwrap_err();
    assert!(error.message().contains("10 ms gap"), "{error}");
}

#[test]
fn keys_alike_but_in_their_last_byte_keep_their_own_counts() {
    // Thousands of keys per length, so many meet in one group of the window's table:
    // held in the slot up to 16 bytes, in the window's key bytes past that.
    let keys: Vec<Vec<u8>> = (9..=20)
        .flat_map(|len| (0..1000u32).map(move |i| format!("{i:0>len$}").into_bytes()))
        .collect();
    let mut w = TumblingWindows::<u64>::new(100).unwrap();
    for (i, key) in keys.iter().enumerate() {
        for _ in 0..=i % 3 {
            *w.accumulator(key, 10).unwrap() += 1;
        }
    }
    let round = changes(&mut w);
    assert_eq!(round.len(), keys.len(), "one entry per key");
    let mut image = StateImage::default();
    image.apply(&round).unwrap();
    let mut restored = restore(TumblingWindows::<u64>::new(100).unwrap(), &image, 0);
    for key in [&keys[0], &keys[keys.len() - 1]] {
        let entry = snapshot::decode_body(snapshot::parse(&image.entries[key]).unwrap().body).unwrap();
        let error = restored.restore_entry(key, entry).unwrap_err();
        assert!(error.message().contains("restored twice"), "{error}");
    }
    for mut windows in [w, restored] {
        let mut fired = Vec::new();
        windows.fire(100, |_, key, n| fired.push((key.to_vec(), n)));
        let mut expected: Vec<(Vec<u8>, u64)> =
            keys.iter().enumerate().map(|(i, key)| (key.clone(), (i % 3 + 1) as u64)).collect();
        expected.sort();
        assert_eq!(fired, expected);
    }
}
