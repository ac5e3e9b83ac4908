use super::*;
use crate::packed::Header;
use crate::state::Keyed;

/// Sums values parsed as integers per key and emits every key's sum on a watermark;
/// state version 2 stores a sum as i64, version 1 stored it as a u32.
struct Sum;

impl Operator for Sum {
    type State = Keyed<i64>;
    const STATE_VERSION: u16 = 2;

    fn init(_: &Config) -> Result<(Self, Keyed<i64>), Error> {
        Ok((Sum, Keyed::default()))
    }

    fn process(
        &mut self,
        sums: &mut Keyed<i64>,
        records: Records<'_>,
        _: &mut Emitter,
    ) -> Result<(), Error> {
        for record in records {
            let text = std::str::from_utf8(record.value).map_err(|e| e.to_string())?;
            let number = text.parse::<i64>().map_err(|e| format!("{text:?}: {e}"))?;
            let key = record.key.unwrap_or(b"");
            if number == 0 {
                sums.remove(key);
            } else {
                *sums.entry(key) += number;
            }
        }
        Ok(())
    }

    fn on_watermark(
        &mut self,
        sums: &mut Keyed<i64>,
        wm: i64,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        let mut all: Vec<_> = sums.iter().collect();
        all.sort();
        for (key, sum) in all {
            out.emit(Some(key), sum.to_string().as_bytes(), wm);
        }
        Ok(())
    }

    fn check_restored(&self, sums: &Keyed<i64>) -> Result<(), Error> {
        if sums.iter().any(|(_, &sum)| sum < 0) {
            return Err("negative sum".into());
        }
        Ok(())
    }

    fn upgrade_state(version: u16, body: &[u8]) -> Result<i64, Error> {
        match version {
            1 => Ok(i64::from(snapshot::decode_body::<u32>(body)?)),
            _ => Err(format!("unknown state version {version}").into()),
        }
    }
}

fn sums(runner: &mut Runner<Sum>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let out = runner.on_watermark_records(0).unwrap();
    out.into_iter().map(|r| (r.key.unwrap(), r.value)).collect()
}

fn record<'a>(key: &'a [u8], value: &'a [u8]) -> Record<'a> {
    Record::new(Some(key), value, 1)
}

fn pairs(chunk: &StateChunk) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    chunk
        .iter()
        .map(|e| e.unwrap())
        .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
        .collect()
}

#[test]
fn a_round_hands_over_only_the_keys_changed_since_the_last() {
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    runner
        .process_records(&[record(b"a", b"40"), record(b"b", b"1"), record(b"a", b"2")])
        .unwrap();
    let first = runner.changes().unwrap();
    assert_eq!(
        pairs(&first).iter().map(|(k, _)| k.as_slice()).collect::<Vec<_>>(),
        [&b"a"[..], b"b"]
    );
    assert!(runner.changes().unwrap().is_empty(), "nothing changed since");

    runner
        .process_records(&[record(b"b", b"0"), record(b"c", b"5")])
        .unwrap();
    let second = pairs(&runner.changes().unwrap());
    assert_eq!(second.len(), 2);
    assert_eq!(second[0], (b"b".to_vec(), None), "b was removed");
    assert_eq!(second[1].0, b"c");

    let mut image = StateImage::default();
    image.apply(&first).unwrap();
    image.apply(&runner_chunk(&second)).unwrap();
    let mut fresh = Runner::<Sum>::init(Config::default()).unwrap();
    fresh.restore_image(&image, 0).unwrap();
    assert_eq!(
        sums(&mut fresh),
        [(b"a".to_vec(), b"42".to_vec()), (b"c".to_vec(), b"5".to_vec())]
    );
    assert!(fresh.changes().unwrap().is_empty(), "restored entries are not changes");
}

fn runner_chunk(pairs: &[(Vec<u8>, Option<Vec<u8>>)]) -> StateChunk {
    let mut chunk = StateChunk::default();
    for (key, value) in pairs {
        chunk.push(key, value.as_deref());
    }
    chunk
}

#[test]
fn a_round_comes_in_chunks_within_the_limit() {
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("key-{i:03}")).collect();
    let records: Vec<Record<'_>> = keys.iter().map(|k| record(k.as_bytes(), b"7")).collect();
    runner.process_records(&records).unwrap();
    let mut seen = 0;
    loop {
        let chunk = runner.snapshot(64).unwrap();
        if chunk.is_empty() {
            break;
        }
        assert!(chunk.data.len() <= 64, "{} bytes", chunk.data.len());
        seen += chunk.len();
    }
    assert_eq!(seen, 100);
    // A limit below one entry still makes progress, one entry per chunk.
    runner.process_records(&records[..3]).unwrap();
    assert_eq!(runner.snapshot(1).unwrap().len(), 1);
    assert_eq!(runner.snapshot(1).unwrap().len(), 1);
    assert_eq!(runner.snapshot(1).unwrap().len(), 1);
    assert!(runner.snapshot(1).unwrap().is_empty());
}

#[test]
fn restore_upgrades_old_versions_and_refuses_unknown_ones() {
    let entry = |version| {
        let mut chunk = StateChunk::default();
        chunk.push(b"k", Some(&snapshot::encode(&7u32, version).unwrap()));
        chunk
    };
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    runner.restore(&entry(1)).unwrap();
    runner.restored(0).unwrap();
    assert_eq!(sums(&mut runner), [(b"k".to_vec(), b"7".to_vec())]);

    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    let error = runner.restore(&entry(3)).unwrap_err();
    assert_eq!(error.message(), "restoring key b\"k\": unknown state version 3");

    let mut negative = StateChunk::default();
    negative.push(b"k", Some(&snapshot::encode(&-1i64, 2).unwrap()));
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    runner.restore(&negative).unwrap();
    assert_eq!(runner.restored(0).unwrap_err().message(), "negative sum");
}

#[test]
fn restore_refuses_removals_duplicates_and_bad_offsets() {
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    let mut removal = StateChunk::default();
    removal.push(b"k", None);
    let error = runner.restore(&removal).unwrap_err();
    assert!(error.message().contains("got a removal"), "{error}");

    let mut twice = StateChunk::default();
    let value = snapshot::encode(&1i64, 2).unwrap();
    twice.push(b"k", Some(&value));
    twice.push(b"k", Some(&value));
    let error = runner.restore(&twice).unwrap_err();
    assert!(error.message().contains("restored twice"), "{error}");

    let mut outside = StateChunk::default();
    outside.push(b"k", Some(&value));
    outside.entries[0].value_len = 1000;
    let error = Runner::<Sum>::init(Config::default())
        .unwrap()
        .restore(&outside)
        .unwrap_err();
    assert!(error.message().contains("outside the chunk"), "{error}");
}

#[test]
fn default_upgrade_names_both_versions() {
    struct Plain;
    impl Operator for Plain {
        type State = Keyed<u8>;
        fn init(_: &Config) -> Result<(Self, Keyed<u8>), Error> {
            Ok((Plain, Keyed::default()))
        }
        fn process(&mut self, _: &mut Keyed<u8>, _: Records<'_>, _: &mut Emitter) -> Result<(), Error> {
            Ok(())
        }
    }
    let mut chunk = StateChunk::default();
    chunk.push(b"k", Some(&snapshot::encode(&0u8, 5).unwrap()));
    let error = Runner::<Plain>::init(Config::default())
        .unwrap()
        .restore(&chunk)
        .unwrap_err();
    assert!(
        error
            .message()
            .contains("the checkpoint holds state version 5 but this plugin reads version 1"),
        "{error}"
    );
}

#[test]
fn errors_and_unordered_headers() {
    let mut runner = Runner::<Sum>::init(Config::default()).unwrap();
    let error = runner
        .process_records(&[Record::new(None, b"x", 1)])
        .unwrap_err();
    assert!(error.message().contains("\"x\""), "{error}");

    let mut batch = Batch::pack(&[Record::new(None, b"1", 1), Record::new(None, b"2", 2)]);
    batch.headers = vec![
        Header {
            entry: 1,
            name: "b".into(),
            value: vec![],
        },
        Header {
            entry: 0,
            name: "a".into(),
            value: vec![],
        },
    ];
    runner.process(&batch).unwrap();
    assert_eq!(runner.state().get(b""), Some(&3));
}
