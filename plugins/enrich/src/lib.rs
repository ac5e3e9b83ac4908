//! Enriches each click with the profile of its user: a stream–table join on the SDK's
//! `join::Table`, keyed by user id.
//!
//! Inputs (the operator's `inputs` in the job file):
//! - `clicks`, a stream: JSON objects (`{"user":"u1","page":"/"}`) keyed by user id;
//! - `users`, a table (`table = true`): key = user id, value = the profile as a JSON
//!   object; an empty value (a tombstone) removes the user, and so does a value that is
//!   not a JSON object (logged: the table holds the latest row, and that row is unusable).
//!
//! Outputs: the first gets each click, keyed by its user id with its timestamp and
//! headers, its value the click's fields, then the profile's fields (prefixed by
//! `prefix`; they replace a click field of the same name), then `"matched": true`; a
//! click whose user has no profile gets only `"matched": false`. Fields come in name
//! order, compact. An output named `invalid`, if present, gets clicks that are not JSON
//! objects unchanged (otherwise they are dropped, and counted).
//!
//! Config (`[operators.config]`, all optional): `fields` (the profile fields to copy,
//! comma-separated; default all), `prefix` (put before each copied field's name;
//! default none), `matched_field` (the name of the marker; default `matched`),
//! `unmatched` (`emit`, the default, or `drop`: what becomes of a click without a
//! profile), `key_field` (key the enriched click by this field of it instead of the user
//! id, e.g. `country`, so that an operator after it can count per country: a string is
//! keyed by its text, another JSON value by its JSON, a click without the field by the
//! empty key).
//!
//! A click and its profile already in the compact form serde_json writes (the common
//! case) are merged as bytes (`merge`); any other goes through serde_json, maps and
//! all. The output is the same bytes either way (`guest-sdk/tests/enrich_raw_merge.rs`).

mod merge;

use serde_json::{Map, Value};
use weir_guest::join::Table;
use weir_guest::json::{self, Member};
use weir_guest::{Config, Emitter, Error, Input, Operator, Output, Record, Records};

use merge::RawMerge;

/// How many clicks' profiles are looked up at once (`Enrich::process`).
const LOOKAHEAD: usize = 32;

/// The operator: its configuration and counters.
#[derive(Debug)]
pub struct Enrich {
    users: Input,
    invalid: Option<Output>,
    fields: Option<Vec<String>>,
    prefix: String,
    matched_field: String,
    drop_unmatched: bool,
    /// The field the enriched click is keyed by, instead of the user id.
    key_field: Option<String>,
    /// Clicks dropped as not JSON objects, for want of an `invalid` output.
    invalid_clicks: u64,
    /// Profile rows that were not JSON objects (and removed their user).
    invalid_rows: u64,
    /// The merge on raw bytes, `None` if the config rules it out (`RawMerge::new`).
    raw: Option<RawMerge>,
    /// Clicks handed to serde_json (`Enrich::parsed_clicks`).
    parsed_clicks: u64,
    /// Scratch space to check a table row.
    row_members: Vec<Member>,
}

impl Enrich {
    /// Clicks this instance dropped because they were not JSON objects.
    pub fn invalid_clicks(&self) -> u64 {
        self.invalid_clicks
    }

    /// Profile rows this instance took as removals because they were not JSON objects.
    pub fn invalid_rows(&self) -> u64 {
        self.invalid_rows
    }

    /// Clicks this instance parsed with serde_json, invalid ones included: the click or
    /// its profile was not in the compact form serde_json writes
    /// (`weir_guest::json::canonical_members`), or the config's `prefix` or
    /// `matched_field` needs escapes in JSON. The others were merged as bytes, to the
    /// same output.
    pub fn parsed_clicks(&self) -> u64 {
        self.parsed_clicks
    }

    /// Applies one update of the `users` table.
    fn update(&mut self, users: &mut Table, row: &Record<'_>) {
        let valid = row.value.is_empty()
            || json::canonical_members(row.value, &mut self.row_members)
            || serde_json::from_slice::<Map<String, Value>>(row.value).is_ok();
        if !valid {
            if self.invalid_rows == 0 {
                weir_guest::warn!(
                    "enrich removes users whose profile is not a JSON object; the first is key \
                     b\"{}\"",
                    row.key.unwrap_or_default().escape_ascii()
                );
            }
            self.invalid_rows += 1;
            users.remove(row.key.unwrap_or_default());
            return;
        }
        users.update(row, <[u8]>::to_vec);
    }

    /// Emits one click, enriched with its profile `row`, unmatched, or to `invalid`.
    fn click(&mut self, row: Option<&[u8]>, click: &Record<'_>, out: &mut Emitter) {
        if !self.merged_click(row, click, out) {
            self.parsed_clicks += 1;
            self.parsed_click(row, click, out);
        }
    }

    /// Emits one click merged as bytes with its profile `row`; false, having emitted
    /// nothing, when the config, the click or the row rule that out.
    fn merged_click(&mut self, row: Option<&[u8]>, click: &Record<'_>, out: &mut Emitter) -> bool {
        let Some(raw) = &mut self.raw else {
            return false;
        };
        if !raw.load(click.value, row) {
            return false;
        }
        if row.is_none() && self.drop_unmatched {
            return true;
        }
        let row = row.unwrap_or_default();
        let key = self
            .key_field
            .as_ref()
            .map(|name| raw.key_of(name, click.value, row));
        let key = key.as_deref().or(click.key);
        let mut emitted = out.emit_with(key, click.timestamp, |value| {
            raw.write(click.value, row, value);
        });
        for header in click.headers {
            emitted = emitted.header(&header.name, &header.value);
        }
        true
    }

    /// Emits one click as serde_json parses and writes it with its profile `row`.
    fn parsed_click(&mut self, row: Option<&[u8]>, click: &Record<'_>, out: &mut Emitter) {
        let Ok(mut fields) = serde_json::from_slice::<Map<String, Value>>(click.value) else {
            match self.invalid {
                Some(invalid) => out.forward_to(invalid, click),
                None => {
                    if self.invalid_clicks == 0 {
                        weir_guest::warn!(
                            "enrich drops clicks that are not JSON objects and has no `invalid` \
                             output; the first at timestamp {}",
                            click.timestamp
                        );
                    }
                    self.invalid_clicks += 1;
                }
            }
            return;
        };
        // A row is a JSON object when it is stored; one restored from elsewhere may not be.
        let profile = row.and_then(|row| serde_json::from_slice::<Map<String, Value>>(row).ok());
        if profile.is_none() && self.drop_unmatched {
            return;
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
        fields.insert(self.matched_field.clone(), Value::Bool(matched));
        let key = self.key_field.as_ref().map(|name| match fields.get(name) {
            Some(Value::String(text)) => text.as_bytes().to_vec(),
            Some(other) => other.to_string().into_bytes(),
            None => Vec::new(),
        });
        let key = key.as_deref().or(click.key);
        let mut emitted = out.emit_with(key, click.timestamp, |value| {
            serde_json::to_writer(value, &fields).expect("a JSON map always serializes");
        });
        for header in click.headers {
            emitted = emitted.header(&header.name, &header.value);
        }
    }
}

impl Operator for Enrich {
    type State = Table;

    fn init(config: &Config) -> Result<(Self, Table), Error> {
        config.deny_unknown(&[
            "fields",
            "prefix",
            "matched_field",
            "unmatched",
            "key_field",
        ])?;
        config.input("clicks")?;
        let users = config.input("users")?;
        config.deny_unknown_inputs(&["clicks", "users"])?;
        let fields = config.get("fields").map(|list| {
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        });
        if fields.as_ref().is_some_and(Vec::is_empty) {
            return Err(Error::new(
                "operator config `fields` names no field: list the profile fields to copy, \
                 comma-separated (e.g. \"name,country\"), or leave it out to copy all",
            ));
        }
        let matched_field = config.get("matched_field").unwrap_or("matched").to_owned();
        if matched_field.is_empty() {
            return Err(Error::new(
                "operator config `matched_field` is empty: name the field that says whether \
                 a profile was found (default `matched`)",
            ));
        }
        let drop_unmatched = match config.get("unmatched").map(str::trim) {
            None | Some("emit") => false,
            Some("drop") => true,
            Some(other) => {
                return Err(Error::new(format!(
                    "operator config `unmatched` = {other:?} is not valid: expected `emit` (the \
                     default: a click without a profile is emitted with `matched_field` false) \
                     or `drop`"
                )));
            }
        };
        let invalid = config.find_output("invalid");
        if invalid == Some(Output::FIRST) {
            return Err(Error::new(format!(
                "the first output gets the enriched clicks, but it is named `invalid`, the \
                 output for clicks that are not JSON objects; its outputs are {:?}: put another \
                 output first",
                config.outputs()
            )));
        }
        let prefix = config.get("prefix").unwrap_or_default().to_owned();
        let enrich = Enrich {
            users,
            invalid,
            raw: RawMerge::new(&prefix, &matched_field, fields.as_deref()),
            fields,
            prefix,
            matched_field,
            drop_unmatched,
            key_field: config
                .get("key_field")
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
            invalid_clicks: 0,
            invalid_rows: 0,
            parsed_clicks: 0,
            row_members: Vec::new(),
        };
        Ok((enrich, Table::default()))
    }

    fn process(
        &mut self,
        users: &mut Table,
        records: Records<'_>,
        out: &mut Emitter,
    ) -> Result<(), Error> {
        if records.input() == self.users {
            for record in records {
                self.update(users, &record);
            }
            return Ok(());
        }
        // The profiles of a run of clicks are looked up before any is merged: the
        // lookups do not depend on each other, so their cache misses overlap, where
        // one lookup between two merges would wait for memory alone.
        let (mut lookups, mut clicks) = (records.iter(), records.iter());
        loop {
            let mut rows = [None; LOOKAHEAD];
            let mut looked_up = 0;
            for (row, click) in rows.iter_mut().zip(lookups.by_ref()) {
                *row = users.lookup(&click).map(Vec::as_slice);
                looked_up += 1;
            }
            if looked_up == 0 {
                return Ok(());
            }
            for (&row, click) in rows[..looked_up].iter().zip(clicks.by_ref()) {
                self.click(row, &click, out);
            }
        }
    }
}

weir_guest::export_operator!(Enrich);
