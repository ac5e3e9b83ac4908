//! enrich's merge on raw bytes against serde_json: random configs, table rows and clicks
//! (in the form serde_json writes or not, valid JSON or not) through the native Runner,
//! every output record compared with what the serde_json path computes: parse the click
//! and the profile into maps, insert, serialize. Both paths must be taken often.

mod random_json;

use std::collections::HashMap;

use enrich::Enrich;
use random_json::Gen;
use serde_json::{Map, Value};
use weir_guest::packed::Header;
use weir_guest::{Config, OwnedRecord, Record, Runner};

const CLICKS: u32 = 0;
const USERS: u32 = 1;
const USER_KEYS: [&str; 6] = ["u1", "u2", "u3", "u4", "u5", ""];

/// One config of enrich, as pairs, and what the reference needs of it.
struct Setup {
    pairs: Vec<(&'static str, &'static str)>,
    fields: Option<Vec<String>>,
    prefix: &'static str,
    matched_field: &'static str,
    drop_unmatched: bool,
    key_field: Option<&'static str>,
    invalid_output: bool,
}

impl Setup {
    fn random(generator: &mut Gen) -> Self {
        let mut pairs = Vec::new();
        let mut choose = |generator: &mut Gen, key: &'static str, options: &[&'static str]| {
            let value = generator.pick(options);
            (!value.is_empty()).then(|| {
                pairs.push((key, value));
                value
            })
        };
        // The names overlap the generator's keys: fields get replaced, prefixes collide.
        let fields = choose(
            generator,
            "fields",
            &["", "", "name", "name, a,zz,missing", "é,b"],
        );
        let prefix = choose(
            generator,
            "prefix",
            &["", "", "", "p_", "a", "na", "é", "zz", "q\""],
        );
        let matched_field = choose(
            generator,
            "matched_field",
            &["", "", "", "name", "p_name", "a", "é", "zz", "m\\x"],
        );
        let unmatched = choose(generator, "unmatched", &["", "emit", "drop"]);
        let key_field = choose(
            generator,
            "key_field",
            &[
                "", "", "user", "name", "p_name", "matched", "obj", "missing", "a", "é",
            ],
        );
        let invalid_output = generator.below(2) == 0;
        Self {
            fields: fields.map(|list| list.split(',').map(|f| f.trim().to_owned()).collect()),
            prefix: prefix.unwrap_or_default(),
            matched_field: matched_field.unwrap_or("matched"),
            drop_unmatched: unmatched == Some("drop"),
            key_field,
            invalid_output,
            pairs,
        }
    }

    fn runner(&self) -> Runner<Enrich> {
        let outputs: &[&str] = if self.invalid_output {
            &["enriched", "invalid"]
        } else {
            &["enriched"]
        };
        let config = Config::from_pairs(self.pairs.iter().copied())
            .with_inputs(["clicks", "users"])
            .with_outputs(outputs.iter().copied());
        Runner::init(config).unwrap()
    }

    /// What the serde_json path emits for `click` given the table `users`.
    fn expected(
        &self,
        users: &HashMap<Vec<u8>, Vec<u8>>,
        click: &Record<'_>,
    ) -> Option<OwnedRecord> {
        let owned = |output: u8, key: Option<&[u8]>, value: Vec<u8>| OwnedRecord {
            key: key.map(<[u8]>::to_vec),
            value,
            timestamp: click.timestamp,
            headers: click
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
            output,
            tombstone: false,
        };
        let Ok(mut fields) = serde_json::from_slice::<Map<String, Value>>(click.value) else {
            return self
                .invalid_output
                .then(|| owned(1, click.key, click.value.to_vec()));
        };
        let profile = users
            .get(click.key.unwrap_or_default())
            .and_then(|row| serde_json::from_slice::<Map<String, Value>>(row).ok());
        if profile.is_none() && self.drop_unmatched {
            return None;
        }
        let matched = profile.is_some();
        for (name, value) in profile.into_iter().flatten() {
            if self
                .fields
                .as_ref()
                .is_none_or(|wanted| wanted.contains(&name))
            {
                fields.insert(format!("{}{name}", self.prefix), value);
            }
        }
        fields.insert(self.matched_field.to_owned(), Value::Bool(matched));
        let key = self.key_field.map(|name| match fields.get(name) {
            Some(Value::String(text)) => text.as_bytes().to_vec(),
            Some(other) => other.to_string().into_bytes(),
            None => Vec::new(),
        });
        let key = key.as_deref().or(click.key);
        Some(owned(0, key, serde_json::to_vec(&fields).unwrap()))
    }
}

/// A profile row or a click: a random object, now and then something else.
fn value(generator: &mut Gen) -> Vec<u8> {
    match generator.below(20) {
        0 => b"not json".to_vec(),
        1 => b"[1]".to_vec(),
        _ => generator.object(),
    }
}

#[test]
fn the_merge_on_bytes_emits_what_serde_json_would() {
    const ROUNDS: u64 = 400;
    const STEPS: usize = 40;
    let (mut clicks, mut parsed) = (0, 0);
    for round in 0..ROUNDS {
        // A third of the rounds all in the form serde_json writes, but for the odd
        // invalid value: the merge on bytes at work with every config.
        let mut generator = Gen::new(round, if round % 3 == 0 { 0 } else { 2 });
        let setup = Setup::random(&mut generator);
        let mut runner = setup.runner();
        let mut users = HashMap::new();
        for step in 0..STEPS {
            let values: Vec<Vec<u8>> = (0..1 + generator.below(4))
                .map(|_| value(&mut generator))
                .collect();
            let keys: Vec<&str> = values.iter().map(|_| generator.pick(&USER_KEYS)).collect();
            let header = [Header {
                entry: 0,
                name: "trace".into(),
                value: vec![step as u8],
            }];
            let records: Vec<Record<'_>> = keys
                .iter()
                .zip(&values)
                .enumerate()
                .map(|(i, (key, value))| Record {
                    key: (!key.is_empty()).then_some(key.as_bytes()),
                    value,
                    timestamp: (round * 1000 + step as u64) as i64,
                    headers: if i % 2 == 0 { &header } else { &[] },
                    tombstone: false,
                })
                .collect();
            if generator.below(3) == 0 {
                for record in &records {
                    let key = record.key.unwrap_or_default().to_vec();
                    let valid = serde_json::from_slice::<Map<String, Value>>(record.value).is_ok();
                    match generator.below(6) == 0 {
                        true => drop(users.remove(&key)),
                        false if valid => drop(users.insert(key, record.value.to_vec())),
                        false => drop(users.remove(&key)),
                    }
                }
                // A tombstone for some of them, as the table's topic may hold.
                let records: Vec<Record<'_>> = records
                    .iter()
                    .map(|r| {
                        if users.contains_key(r.key.unwrap_or_default()) {
                            *r
                        } else {
                            Record { value: b"", ..*r }
                        }
                    })
                    .collect();
                assert!(
                    runner
                        .process_records_from(USERS, &records)
                        .unwrap()
                        .is_empty()
                );
                continue;
            }
            let expected: Vec<OwnedRecord> = records
                .iter()
                .filter_map(|r| setup.expected(&users, r))
                .collect();
            let out = runner.process_records_from(CLICKS, &records).unwrap();
            let shown: Vec<String> = records
                .iter()
                .map(|r| String::from_utf8_lossy(r.value).into_owned())
                .collect();
            assert_eq!(
                out, expected,
                "round {round} step {step}, config {:?}, clicks {shown:?}",
                setup.pairs
            );
            clicks += records.len() as u64;
        }
        parsed += runner.operator().parsed_clicks();
    }
    // Both paths are taken, each often enough to be tested.
    assert!(parsed > clicks / 5, "{parsed} of {clicks} clicks parsed");
    assert!(
        parsed < clicks * 3 / 5,
        "{parsed} of {clicks} clicks parsed"
    );
}
