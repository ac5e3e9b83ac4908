//! The join helpers through the native Runner: a stream–table join on `join::Table` and
//! an interval join on `join::IntervalJoin`, each checked for matches, misses, removals
//! and eviction, for checkpoints that take only what changed, and against a brute-force
//! reference across checkpoints and restores (every pair once, none lost, none twice).

use std::collections::BTreeMap;

use weir_guest::join::{IntervalJoin, Table};
use weir_guest::state::StateImage;
use weir_guest::{Config, Emitter, Error, Input, Operator, OwnedRecord, Record, Records, Runner};

/// Emits each stream record as `value|row`, or `value|-` when its key has no row.
struct Lookup {
    table: Input,
}

impl Operator for Lookup {
    type State = Table<Vec<u8>>;

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        config.input("stream")?;
        let lookup = Lookup {
            table: config.input("table")?,
        };
        Ok((lookup, Table::default()))
    }

    fn process(
        &mut self,
        table: &mut Self::State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            if records.input() == self.table {
                table.update(&record, <[u8]>::to_vec);
                continue;
            }
            let row = table.lookup(&record).map_or(&b"-"[..], Vec::as_slice);
            out.emit_with(record.key, record.timestamp, |value| {
                value.extend(record.value);
                value.extend(b"|");
                value.extend(row);
            });
        }
        Ok(())
    }
}

fn lookup() -> Runner<Lookup> {
    Runner::init(Config::default().with_inputs(["stream", "table"])).unwrap()
}

const STREAM: u32 = 0;
const TABLE: u32 = 1;

fn texts(out: &[OwnedRecord]) -> Vec<String> {
    out.iter()
        .map(|r| String::from_utf8(r.value.clone()).unwrap())
        .collect()
}

fn rec<'a>(key: &'a str, value: &'a str, ts: i64) -> Record<'a> {
    Record::new(Some(key.as_bytes()), value.as_bytes(), ts)
}

#[test]
fn stream_records_find_the_latest_row_of_their_key() {
    let mut runner = lookup();
    runner
        .process_records_from(
            TABLE,
            &[
                rec("u1", "ada", 0),
                rec("u2", "bob", 0),
                rec("u1", "ada2", 0),
            ],
        )
        .unwrap();
    let out = runner
        .process_records_from(
            STREAM,
            &[rec("u1", "c1", 5), rec("u2", "c2", 6), rec("u3", "c3", 7)],
        )
        .unwrap();
    assert_eq!(texts(&out), ["c1|ada2", "c2|bob", "c3|-"]);
    assert_eq!(out[0].key.as_deref(), Some(&b"u1"[..]));

    // A tombstone removes the row; a later update brings one back.
    runner
        .process_records_from(TABLE, &[rec("u2", "", 0)])
        .unwrap();
    let out = runner
        .process_records_from(STREAM, &[rec("u2", "c4", 8)])
        .unwrap();
    assert_eq!(texts(&out), ["c4|-"]);
    runner
        .process_records_from(TABLE, &[rec("u2", "bob2", 0)])
        .unwrap();
    let out = runner
        .process_records_from(STREAM, &[rec("u2", "c5", 9)])
        .unwrap();
    assert_eq!(texts(&out), ["c5|bob2"]);
    assert_eq!(runner.state().len(), 2);
}

fn changed_keys(runner: &mut Runner<impl Operator>) -> Vec<(Vec<u8>, bool)> {
    let chunk = runner.changes().unwrap();
    chunk
        .iter()
        .map(|entry| entry.unwrap())
        .map(|(key, value)| (key.to_vec(), value.is_some()))
        .collect()
}

#[test]
fn a_table_checkpoint_takes_the_rows_changed_and_restores_the_same_lookups() {
    let mut runner = lookup();
    runner
        .process_records_from(
            TABLE,
            &[rec("u1", "ada", 0), rec("u2", "bob", 0), rec("u3", "cy", 0)],
        )
        .unwrap();
    let mut image = StateImage::default();
    image.apply(&runner.changes().unwrap()).unwrap();
    assert_eq!(image.entries.len(), 3);

    // Lookups change nothing; an update and a tombstone are the only changes.
    runner
        .process_records_from(STREAM, &[rec("u1", "c", 1), rec("u2", "c", 1)])
        .unwrap();
    assert!(changed_keys(&mut runner).is_empty());
    runner
        .process_records_from(
            TABLE,
            &[rec("u2", "bob2", 0), rec("u3", "", 0), rec("u9", "", 0)],
        )
        .unwrap();
    let mut chunk = runner.changes().unwrap();
    let changed: Vec<_> = chunk
        .iter()
        .map(|e| e.unwrap())
        .map(|(k, v)| (k.to_vec(), v.is_some()))
        .collect();
    assert_eq!(
        changed.len(),
        2,
        "u2 updated and u3 removed; u9 was never there"
    );
    assert!(changed.contains(&(b"u2".to_vec(), true)));
    assert!(changed.contains(&(b"u3".to_vec(), false)));
    image.apply(&std::mem::take(&mut chunk)).unwrap();

    let mut restored = lookup();
    restored.restore_image(&image, i64::MIN).unwrap();
    let clicks = [rec("u1", "c", 2), rec("u2", "c", 2), rec("u3", "c", 2)];
    assert_eq!(
        restored.process_records_from(STREAM, &clicks).unwrap(),
        runner.process_records_from(STREAM, &clicks).unwrap()
    );
    assert_eq!(
        texts(&restored.process_records_from(STREAM, &clicks).unwrap()),
        ["c|ada", "c|bob2", "c|-"]
    );
    assert!(
        restored.changes().unwrap().is_empty(),
        "restored rows are not changes"
    );
}

/// Emits each pair `left+right` at the later time; config `lower`, `upper`.
struct Pairs;

impl Operator for Pairs {
    type State = IntervalJoin<String, String>;

    fn init(config: &Config) -> Result<(Self, Self::State), Error> {
        let lower = config.require("lower", "milliseconds")?;
        let upper = config.require("upper", "milliseconds")?;
        Ok((Pairs, IntervalJoin::new(lower, upper)?))
    }

    fn process(
        &mut self,
        join: &mut Self::State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let key = record.key.unwrap_or_default();
            let value = String::from_utf8_lossy(record.value).into_owned();
            let mut emit = |m: weir_guest::join::Match<'_, String, String>| {
                out.emit(
                    Some(m.key),
                    format!("{}+{}", m.left, m.right).as_bytes(),
                    m.time(),
                );
            };
            if records.input() == Input::FIRST {
                join.left(key, record.timestamp, value, &mut emit)?;
            } else {
                join.right(key, record.timestamp, value, &mut emit)?;
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        join: &mut Self::State,
        watermark: i64,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        join.evict(watermark);
        Ok(())
    }
}

fn pairs(lower: i64, upper: i64) -> Runner<Pairs> {
    let (lower, upper) = (lower.to_string(), upper.to_string());
    let config = Config::from_pairs([("lower", lower.as_str()), ("upper", upper.as_str())])
        .with_inputs(["left", "right"]);
    Runner::init(config).unwrap()
}

const LEFT: u32 = 0;
const RIGHT: u32 = 1;

#[test]
fn pairs_within_the_bounds_are_found_by_whichever_record_comes_second() {
    let mut runner = pairs(0, 100);
    let out = runner
        .process_records_from(LEFT, &[rec("o1", "order1", 1_000)])
        .unwrap();
    assert!(out.is_empty());
    let out = runner
        .process_records_from(
            RIGHT,
            &[
                rec("o1", "pay-early", 999),  // before the order: no match
                rec("o1", "pay-at", 1_000),   // bounds are inclusive
                rec("o1", "pay-last", 1_100), // likewise
                rec("o1", "pay-late", 1_101), // after the bound
                rec("o2", "pay-other", 1_050),
            ],
        )
        .unwrap();
    assert_eq!(texts(&out), ["order1+pay-at", "order1+pay-last"]);
    assert_eq!((out[0].timestamp, out[1].timestamp), (1_000, 1_100));

    // An order arriving after its payments meets them, by payment time.
    let out = runner
        .process_records_from(LEFT, &[rec("o1", "order2", 1_001)])
        .unwrap();
    assert_eq!(texts(&out), ["order2+pay-last", "order2+pay-late"]);
    let out = runner
        .process_records_from(LEFT, &[rec("o3", "order3", 1_001)])
        .unwrap();
    assert!(out.is_empty(), "no payment of o3");
}

#[test]
fn the_watermark_evicts_what_can_no_longer_match_and_makes_older_records_late() {
    let mut runner = pairs(0, 100);
    runner
        .process_records_from(LEFT, &[rec("a", "o-a", 1_000), rec("b", "o-b", 1_500)])
        .unwrap();
    runner
        .process_records_from(RIGHT, &[rec("c", "p-c", 1_200)])
        .unwrap();
    assert_eq!(runner.state().buffered(), (2, 1));

    // At 1 100 a payment may still be at 1 100, within the order at 1 000's bound.
    runner.on_watermark_records(1_100).unwrap();
    assert_eq!(runner.state().buffered(), (2, 1));
    // At 1 101 the order at 1 000 can match nothing any more.
    runner.on_watermark_records(1_101).unwrap();
    assert_eq!(runner.state().buffered(), (1, 1));
    // A payment waits for orders until the watermark passes its own time.
    runner.on_watermark_records(1_201).unwrap();
    assert_eq!(runner.state().buffered(), (1, 0));

    // Late records are dropped, not joined: their partners may be gone.
    let out = runner
        .process_records_from(RIGHT, &[rec("b", "p-late", 1_200)])
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(runner.state().late(), 1);
    let out = runner
        .process_records_from(RIGHT, &[rec("b", "p-b", 1_550)])
        .unwrap();
    assert_eq!(texts(&out), ["o-b+p-b"]);
}

#[test]
fn an_interval_checkpoint_takes_only_the_records_buffered_or_evicted_since() {
    let mut runner = pairs(0, 100);
    let many: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    let orders: Vec<Record<'_>> = many.iter().map(|k| rec(k, "o", 1_000)).collect();
    runner.process_records_from(LEFT, &orders).unwrap();
    assert_eq!(changed_keys(&mut runner).len(), 50);
    assert!(changed_keys(&mut runner).is_empty());

    runner
        .process_records_from(RIGHT, &[rec("k7", "p", 1_150)])
        .unwrap();
    let changed = changed_keys(&mut runner);
    assert_eq!(changed.len(), 1, "one payment buffered: {changed:?}");
    assert!(changed[0].1);

    runner
        .process_records_from(LEFT, &[rec("k8", "o", 1_200)])
        .unwrap();
    runner.changes().unwrap();
    runner.on_watermark_records(1_101).unwrap();
    let changed = changed_keys(&mut runner);
    assert_eq!(
        changed.len(),
        50,
        "the 50 orders at 1 000 evicted, nothing else"
    );
    assert!(changed.iter().all(|(_, present)| !present));
    assert_eq!(runner.state().buffered(), (1, 1));
}

/// One step of a run: a record of one side, or a watermark.
#[derive(Clone, Debug)]
enum Step {
    Left(String, i64, String),
    Right(String, i64, String),
    Watermark(i64),
}

/// A run of records of 5 keys, times moving forward with jitter (some late), watermarks
/// every so often; a xorshift generator, so each seed is one fixed run.
fn run_of(seed: u64, steps: usize) -> Vec<Step> {
    let mut state = seed.max(1);
    let mut next = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let mut time = 1_000;
    let mut watermark = i64::MIN;
    let mut run = Vec::new();
    for i in 0..steps {
        time += next(20) as i64;
        match next(10) {
            0 => {
                watermark = watermark.max(time - 150 + next(100) as i64);
                run.push(Step::Watermark(watermark));
            }
            side => {
                let key = format!("k{}", next(5));
                let at = time - next(120) as i64;
                let value = format!("{i}");
                run.push(if side % 2 == 0 {
                    Step::Left(key, at, value)
                } else {
                    Step::Right(key, at, value)
                });
            }
        }
    }
    run
}

/// Every pair the bounds allow among the records that were not late when they came.
fn reference(run: &[Step], lower: i64, upper: i64) -> BTreeMap<String, usize> {
    let mut watermark = i64::MIN;
    let (mut lefts, mut rights) = (Vec::new(), Vec::new());
    for step in run {
        match step {
            Step::Watermark(w) => watermark = watermark.max(*w),
            Step::Left(k, t, v) if *t >= watermark => lefts.push((k, *t, v)),
            Step::Right(k, t, v) if *t >= watermark => rights.push((k, *t, v)),
            _ => {}
        }
    }
    let mut expected = BTreeMap::new();
    for (lk, lt, lv) in &lefts {
        for (rk, rt, rv) in &rights {
            if lk == rk && lt + lower <= *rt && *rt <= lt + upper {
                *expected.entry(format!("{lk}:{lv}+{rv}")).or_default() += 1;
            }
        }
    }
    expected
}

fn apply(runner: &mut Runner<Pairs>, step: &Step) -> Vec<String> {
    let out = match step {
        Step::Left(k, t, v) => runner.process_records_from(LEFT, &[rec(k, v, *t)]),
        Step::Right(k, t, v) => runner.process_records_from(RIGHT, &[rec(k, v, *t)]),
        Step::Watermark(w) => runner.on_watermark_records(*w),
    };
    out.unwrap()
        .into_iter()
        .map(|r| {
            let key = String::from_utf8(r.key.unwrap()).unwrap();
            format!("{key}:{}", String::from_utf8(r.value).unwrap())
        })
        .collect()
}

fn counted(pairs: &[String]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for pair in pairs {
        *counts.entry(pair.clone()).or_default() += 1;
    }
    counts
}

#[test]
fn every_pair_once_across_checkpoints_and_restores_as_a_brute_force_reference() {
    for (seed, lower, upper) in [
        (1, 0, 100),
        (2, -30, 40),
        (3, 10, 12),
        (4, -80, -20),
        (5, 0, 2),
    ] {
        let run = run_of(seed, 3_000);
        let expected = reference(&run, lower, upper);
        eprintln!("seed {seed}, [{lower}, {upper}]: {} pairs", expected.len());
        assert!(
            expected.len() > 20,
            "seed {seed}: a run with few pairs proves little"
        );

        // Uninterrupted.
        let mut straight = pairs(lower, upper);
        let all: Vec<String> = run.iter().flat_map(|s| apply(&mut straight, s)).collect();
        assert_eq!(counted(&all), expected, "seed {seed}, no restore");

        // A checkpoint every 50 steps; at each, the run fails 30 steps later, whatever it
        // emitted after the checkpoint is discarded (an aborted transaction), and a fresh
        // instance restores the checkpoint and replays from there.
        let mut runner = pairs(lower, upper);
        let mut committed: Vec<String> = Vec::new();
        let mut image = StateImage::default();
        let mut watermark = i64::MIN;
        let mut at = 0;
        while at < run.len() {
            let checkpoint = (at + 50).min(run.len());
            for step in &run[at..checkpoint] {
                committed.extend(apply(&mut runner, step));
                if let Step::Watermark(w) = step {
                    watermark = watermark.max(*w);
                }
            }
            image.apply(&runner.changes().unwrap()).unwrap();
            for step in run.iter().skip(checkpoint).take(30) {
                apply(&mut runner, step);
            }
            runner = pairs(lower, upper);
            runner.restore_image(&image, watermark).unwrap();
            at = checkpoint;
        }
        assert_eq!(
            counted(&committed),
            expected,
            "seed {seed}, restored every 50 steps"
        );
        assert!(
            counted(&committed).values().all(|&n| n == 1),
            "seed {seed}: a pair twice"
        );
        assert_eq!(
            committed, all,
            "seed {seed}: the same pairs in the same order"
        );
    }
}
