//! `KeyedMap` and `Timers` against brute-force references, driven through a `Runner`
//! with checkpoints taken, and instances replaced by fresh ones restored from them, at
//! random points: neither the output nor the state may depend on them.

use std::collections::{BTreeMap, BTreeSet};

use super::subkey::{self, murmur2};
use super::*;
use crate::{Config, Emitter, Operator, Record, Records, Runner};

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

fn entries(chunk: &StateChunk) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    chunk
        .iter()
        .map(|e| e.unwrap())
        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
        .collect()
}

/// A fresh runner restored from `image` at `watermark`; its first round is empty.
fn restored<O: Operator>(image: &StateImage, watermark: i64, config: Config) -> Runner<O> {
    let mut fresh = Runner::<O>::init(config).unwrap();
    fresh.restore_image(image, watermark).unwrap();
    assert!(
        fresh.changes().unwrap().is_empty(),
        "restored entries are not changes"
    );
    fresh
}

/// `set K V` / `del K` per record: a map of u32 to u64 per key.
struct MapOp;

impl Operator for MapOp {
    type State = KeyedMap<u32, u64>;

    fn init(_: &Config) -> Result<(Self, Self::State), Error> {
        Ok((MapOp, KeyedMap::default()))
    }

    fn process(
        &mut self,
        map: &mut Self::State,
        records: Records<'_>,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let key = record.key.unwrap_or(b"");
            let text = std::str::from_utf8(record.value).unwrap();
            let words: Vec<&str> = text.split(' ').collect();
            match words[..] {
                ["set", entry, value] => {
                    map.insert(key, entry.parse().unwrap(), value.parse().unwrap());
                }
                ["add", entry, value] => {
                    if let Some(total) = map.get_mut(key, &entry.parse().unwrap()) {
                        *total += value.parse::<u64>().unwrap();
                    }
                }
                ["del", entry] => {
                    map.remove(key, &entry.parse().unwrap());
                }
                ["odd"] => map.retain(key, |entry, _| entry % 2 == 0),
                _ => panic!("{text}"),
            }
        }
        Ok(())
    }
}

type MapModel = BTreeMap<(Vec<u8>, u32), u64>;

fn map_content(map: &KeyedMap<u32, u64>) -> MapModel {
    map.iter()
        .map(|(key, entry, value)| ((key.to_vec(), *entry), *value))
        .collect()
}

#[test]
fn a_keyed_map_changes_one_entry_per_changed_map_key() {
    let mut runner = Runner::<MapOp>::init(Config::default()).unwrap();
    let ops: Vec<String> = (0..60).map(|i| format!("set {i} {}", i * 10)).collect();
    let records: Vec<Record<'_>> = ops
        .iter()
        .map(|op| Record::new(Some(b"user"), op.as_bytes(), 0))
        .collect();
    runner.process_records(&records).unwrap();
    let first = runner.changes().unwrap();
    assert_eq!(first.len(), 60, "each entry is a state entry of its own");
    for (state_key, _) in entries(&first) {
        assert_eq!(murmur2(&state_key), murmur2(b"user"), "in the key's group");
        assert_eq!(subkey::split(&state_key).unwrap().0, b"user");
    }

    runner
        .process_records(&[Record::new(Some(b"user"), b"add 7 1", 0)])
        .unwrap();
    let second = entries(&runner.changes().unwrap());
    assert_eq!(second.len(), 1, "one changed entry, one state entry");
    let (key, sub) = subkey::split(&second[0].0).unwrap();
    assert_eq!(
        (key, snapshot::decode_body::<u32>(sub).unwrap()),
        (&b"user"[..], 7)
    );
    let value = second[0].1.as_deref().unwrap();
    assert_eq!(
        snapshot::decode_body::<u64>(snapshot::parse(value).unwrap().body).unwrap(),
        71
    );

    runner
        .process_records(&[
            Record::new(Some(b"user"), b"del 8", 0),
            Record::new(Some(b"user"), b"set 8 1", 0),
            Record::new(Some(b"user"), b"del 9", 0),
        ])
        .unwrap();
    let third = entries(&runner.changes().unwrap());
    assert_eq!(
        third.len(),
        2,
        "8 re-set and 9 removed, each once: {third:?}"
    );
    assert!(third.iter().any(|(_, value)| value.is_none()));
    assert!(
        runner.changes().unwrap().is_empty(),
        "nothing changed since"
    );
}

#[test]
fn a_keyed_map_matches_a_plain_map_across_snapshots_and_restores() {
    for seed in 1..25 {
        let mut rng = Lcg(seed);
        let mut runner = Runner::<MapOp>::init(Config::default()).unwrap();
        let mut model = MapModel::new();
        let mut image = StateImage::default();
        for _ in 0..60 {
            let ops: Vec<(Vec<u8>, String)> = (0..1 + rng.below(15))
                .map(|_| {
                    let key = format!("k{}", rng.below(4)).into_bytes();
                    let entry = rng.below(12) as u32;
                    let op = match rng.below(7) {
                        0..=2 => format!("set {entry} {}", rng.below(100)),
                        3 | 4 => format!("add {entry} {}", rng.below(5)),
                        5 => format!("del {entry}"),
                        _ => "odd".to_owned(),
                    };
                    (key, op)
                })
                .collect();
            for (key, op) in &ops {
                let words: Vec<&str> = op.split(' ').collect();
                match words[..] {
                    ["set", e, v] => {
                        model.insert((key.clone(), e.parse().unwrap()), v.parse().unwrap());
                    }
                    ["add", e, v] => {
                        if let Some(total) = model.get_mut(&(key.clone(), e.parse().unwrap())) {
                            *total += v.parse::<u64>().unwrap();
                        }
                    }
                    ["del", e] => {
                        model.remove(&(key.clone(), e.parse().unwrap()));
                    }
                    _ => model.retain(|(k, e), _| k != key || e % 2 == 0),
                }
            }
            let records: Vec<Record<'_>> = ops
                .iter()
                .map(|(key, op)| Record::new(Some(key), op.as_bytes(), 0))
                .collect();
            runner.process_records(&records).unwrap();
            assert_eq!(map_content(runner.state()), model, "seed {seed}");
            assert_eq!(runner.state().len(), model.len());
            match rng.below(5) {
                0 | 1 => image.apply(&small_chunks(&mut runner)).unwrap(),
                2 => {
                    image.apply(&small_chunks(&mut runner)).unwrap();
                    runner = restored(&image, 0, Config::default());
                    assert_eq!(map_content(runner.state()), model, "seed {seed}, restored");
                }
                _ => {}
            }
        }
        image.apply(&small_chunks(&mut runner)).unwrap();
        let fresh = restored::<MapOp>(&image, 0, Config::default());
        assert_eq!(
            map_content(fresh.state()),
            model,
            "seed {seed}, the image holds the model"
        );
    }
}

/// One round in chunks of 64 bytes, each within the limit unless it holds one entry.
fn small_chunks<O: Operator>(runner: &mut Runner<O>) -> StateChunk {
    let mut all = StateChunk::default();
    loop {
        let chunk = runner.snapshot(64).unwrap();
        if chunk.is_empty() {
            return all;
        }
        assert!(
            chunk.data.len() <= 64 || chunk.len() == 1,
            "{} bytes",
            chunk.data.len()
        );
        for (key, value) in chunk.iter().map(Result::unwrap) {
            all.push(key, value);
        }
    }
}

/// Per record `reg T` / `del T`: a timer of the record's key. A fired timer at `time`
/// emits itself and, depending on `time`, registers another one later, one already
/// passed (it fires at the next watermark), or one the same (again next watermark),
/// and deletes one; the same rules as `TimerModel`.
struct Clock;

/// What a fired timer does: `(register, delete)`, times of its key.
fn reaction(time: i64) -> (Option<i64>, Option<i64>) {
    match time.rem_euclid(7) {
        0 => (Some(time + 13), None),
        1 => (Some(time - 5), None),
        2 => (Some(time), Some(time + 3)),
        3 => (None, Some(time + 1)),
        _ => (None, None),
    }
}

impl Operator for Clock {
    type State = (Keyed<u64>, Timers);

    fn init(_: &Config) -> Result<(Self, Self::State), Error> {
        Ok((Clock, Default::default()))
    }

    fn process(
        &mut self,
        (_, timers): &mut Self::State,
        records: Records<'_>,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let key = record.key.unwrap_or(b"");
            let text = std::str::from_utf8(record.value).unwrap();
            match text.split_once(' ') {
                Some(("reg", time)) => timers.register(key, time.parse().unwrap()),
                Some(("del", time)) => timers.delete(key, time.parse().unwrap()),
                _ => panic!("{text}"),
            };
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        (fired, timers): &mut Self::State,
        key: &[u8],
        time: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        *fired.entry(key) += 1;
        out.emit(Some(key), b"", time);
        let (register, delete) = reaction(time);
        if let Some(later) = register {
            timers.register(key, later);
        }
        if let Some(time) = delete {
            timers.delete(key, time);
        }
        Ok(())
    }
}

/// The timers as a plain set, fired as documented.
#[derive(Default)]
struct TimerModel {
    timers: BTreeSet<(i64, Vec<u8>)>,
}

impl TimerModel {
    fn fire(&mut self, watermark: i64, fired: &mut Vec<(Vec<u8>, i64)>) {
        let mut due: BTreeSet<(i64, Vec<u8>)> = self
            .timers
            .iter()
            .filter(|(time, _)| *time <= watermark)
            .cloned()
            .collect();
        while let Some((time, key)) = due.pop_first() {
            self.timers.remove(&(time, key.clone()));
            fired.push((key.clone(), time));
            let (register, delete) = reaction(time);
            // Registered while firing, so not in `due`: the next watermark fires it.
            if let Some(later) = register {
                self.timers.insert((later, key.clone()));
            }
            if let Some(gone) = delete {
                self.timers.remove(&(gone, key.clone()));
                due.remove(&(gone, key.clone()));
            }
        }
    }
}

#[test]
fn timers_fire_as_a_brute_force_reference_across_snapshots_and_restores() {
    for seed in 1..40 {
        let mut rng = Lcg(seed);
        let mut runner = Runner::<Clock>::init(Config::default()).unwrap();
        let mut model = TimerModel::default();
        let (mut fired, mut expected) = (Vec::new(), Vec::new());
        let mut image = StateImage::default();
        let mut watermark = 0i64;
        for _ in 0..80 {
            let ops: Vec<(Vec<u8>, String)> = (0..rng.below(8))
                .map(|_| {
                    let key = format!("k{}", rng.below(5)).into_bytes();
                    // Some in the past: they fire at the next watermark.
                    let time = watermark - 20 + rng.below(120) as i64;
                    let op = if rng.below(4) == 0 { "del" } else { "reg" };
                    (key, format!("{op} {time}"))
                })
                .collect();
            for (key, op) in &ops {
                let (op, time) = op.split_once(' ').unwrap();
                let timer = (time.parse().unwrap(), key.clone());
                match op {
                    "reg" => model.timers.insert(timer),
                    _ => model.timers.remove(&timer),
                };
            }
            let records: Vec<Record<'_>> = ops
                .iter()
                .map(|(key, op)| Record::new(Some(key), op.as_bytes(), 0))
                .collect();
            runner.process_records(&records).unwrap();
            // Sometimes the same watermark again: timers due meanwhile fire then.
            watermark += rng.below(30) as i64;
            for record in runner.on_watermark_records(watermark).unwrap() {
                fired.push((record.key.unwrap(), record.timestamp));
            }
            model.fire(watermark, &mut expected);
            assert_eq!(fired, expected, "seed {seed}");
            let held: BTreeSet<(i64, Vec<u8>)> = runner
                .state()
                .1
                .queue
                .iter()
                .map(|(time, key)| (*time, key.to_vec()))
                .collect();
            assert_eq!(held, model.timers, "seed {seed}");
            assert_eq!(runner.state().1.len(), model.timers.len());
            match rng.below(4) {
                0 => image.apply(&small_chunks(&mut runner)).unwrap(),
                1 => {
                    image.apply(&small_chunks(&mut runner)).unwrap();
                    runner = restored(&image, watermark, Config::default());
                }
                _ => {}
            }
        }
        assert!(
            fired.len() > 20,
            "seed {seed}: only {} timers fired",
            fired.len()
        );
    }
}

#[test]
fn a_timer_registered_twice_is_one_and_each_change_is_one_entry() {
    let mut timers = Timers::default();
    assert!(timers.register(b"k", 10));
    assert!(!timers.register(b"k", 10), "a key holds a time once");
    assert!(timers.register(b"k", 5));
    assert!(timers.register(b"j", 5));
    assert_eq!(timers.times(b"k").collect::<Vec<_>>(), [5, 10]);
    assert_eq!(timers.next(), Some((5, &b"j"[..])));
    let mut changes = Changes::new(1, 1 << 20);
    assert_eq!(timers.drain_changes(&mut changes).unwrap(), Drained::All);
    assert_eq!(changes.into_chunk().len(), 3);
    assert!(timers.delete(b"k", 10));
    assert!(!timers.delete(b"k", 10));
    assert!(!timers.contains(b"k", 10));
    let mut changes = Changes::new(1, 1 << 20);
    timers.drain_changes(&mut changes).unwrap();
    let round = entries(&changes.into_chunk());
    assert_eq!(round.len(), 1);
    assert_eq!(round[0].1, None, "a deleted timer is a removal");
    assert_eq!(murmur2(&round[0].0), murmur2(b"k"));
}

#[test]
fn an_operator_without_on_timer_says_so_when_a_timer_fires() {
    struct Forgetful;
    impl Operator for Forgetful {
        type State = Timers;
        fn init(_: &Config) -> Result<(Self, Timers), Error> {
            Ok((Forgetful, Timers::default()))
        }
        fn process(
            &mut self,
            timers: &mut Timers,
            records: Records<'_>,
            _: &mut Emitter,
        ) -> Result<(), Error> {
            for record in records {
                timers.register(record.key.unwrap_or(b""), record.timestamp);
            }
            Ok(())
        }
    }
    let mut runner = Runner::<Forgetful>::init(Config::default()).unwrap();
    runner
        .process_records(&[Record::new(Some(b"k"), b"", 5)])
        .unwrap();
    assert!(runner.on_watermark(4).unwrap().is_empty());
    let error = runner.on_watermark(5).unwrap_err();
    assert!(
        error.message().contains("the timer of key b\"k\" at 5"),
        "{error}"
    );
    assert!(
        error
            .message()
            .contains("does not implement Operator::on_timer"),
        "{error}"
    );
}

#[test]
fn tuple_parts_keep_their_entries_apart_and_refuse_each_others() {
    let mut state: (Keyed<u8>, KeyedMap<u8, u8>, Timers) = Default::default();
    *state.0.entry(b"k") = 1;
    state.1.insert(b"k", 0, 2);
    state.2.register(b"k", 0);
    let mut changes = Changes::new(1, 1 << 20);
    state.drain_changes(&mut changes).unwrap();
    let round = entries(&changes.into_chunk());
    let keys: BTreeSet<&Vec<u8>> = round.iter().map(|(key, _)| key).collect();
    assert_eq!(keys.len(), 3, "three parts, three state keys: {round:?}");
    for (key, value) in &round {
        assert_eq!(murmur2(key), murmur2(b"k"));
        let body = snapshot::parse(value.as_deref().unwrap()).unwrap().body;
        let entry: Part3<u8, u8, ()> = snapshot::decode_body(body).unwrap();
        let part = subkey::split(key).unwrap().1[0];
        let matches = matches!(
            (part, &entry),
            (0, Part3::First(1)) | (1, Part3::Second(2)) | (2, Part3::Third(()))
        );
        assert!(matches, "part {part} holds {entry:?}");
    }

    let mut image = StateImage::default();
    let mut chunk = StateChunk::default();
    for (key, value) in &round {
        chunk.push(key, value.as_deref());
    }
    image.apply(&chunk).unwrap();
    let mut fresh: (Keyed<u8>, KeyedMap<u8, u8>, Timers) = Default::default();
    for (key, value) in &image.entries {
        let entry = snapshot::decode_body(snapshot::parse(value).unwrap().body).unwrap();
        restore(&mut fresh, key, entry).unwrap();
    }
    assert_eq!(fresh.0.get(b"k"), Some(&1));
    assert_eq!(fresh.1.get(b"k", &0), Some(&2));
    assert!(fresh.2.contains(b"k", 0));

    // The first part's key with the second part's value.
    let (key, _) = round
        .iter()
        .find(|(key, _)| subkey::split(key).unwrap().1 == [0])
        .unwrap();
    let error = restore(&mut fresh, key, Part3::Second(2)).unwrap_err();
    assert!(
        error
            .message()
            .contains("is not the part its value was written for"),
        "{error}"
    );
    let error = restore(&mut fresh, b"plain", Part3::First(1)).unwrap_err();
    assert!(
        error.message().contains("is not one weir-guest writes"),
        "{error}"
    );
}

/// Counts each key's records and keeps, outside its state, the total over all keys:
/// a cache `restored` rebuilds.
struct Cached {
    total: u64,
}

impl Operator for Cached {
    type State = Keyed<u64>;

    fn init(_: &Config) -> Result<(Self, Self::State), Error> {
        Ok((Cached { total: 0 }, Keyed::default()))
    }

    fn process(
        &mut self,
        counts: &mut Self::State,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            *counts.entry(record.key.unwrap_or(b"")) += 1;
            self.total += 1;
            out.emit(None, self.total.to_string().as_bytes(), record.timestamp);
        }
        Ok(())
    }

    fn restored(&mut self, counts: &mut Self::State, _: i64) -> Result<(), Error> {
        self.total = counts.iter().map(|(_, n)| n).sum();
        Ok(())
    }
}

#[test]
fn restored_rebuilds_what_the_operator_derives_from_its_state() {
    let mut runner = Runner::<Cached>::init(Config::default()).unwrap();
    runner
        .process_records(&[
            Record::new(Some(b"a"), b"", 0),
            Record::new(Some(b"b"), b"", 0),
        ])
        .unwrap();
    let mut image = StateImage::default();
    image.apply(&runner.changes().unwrap()).unwrap();
    let mut fresh = restored::<Cached>(&image, 0, Config::default());
    let out = fresh
        .process_records(&[Record::new(Some(b"a"), b"", 0)])
        .unwrap();
    assert_eq!(out[0].value, b"3");
}
