//! enrich's join on raw bytes: a click and a profile in the form serde_json writes
//! (`weir_guest::json::canonical_members`) are merged member by member, in name order,
//! straight into the output value, with no map built. It writes exactly what
//! serde_json would; anything it cannot vouch for goes through serde_json in `lib.rs`.

use std::borrow::Cow;
use std::cmp::Ordering;

use weir_guest::ValueWriter;
use weir_guest::json::{self, Member};

/// What the merge needs of the config, prepared once, and its scratch space.
#[derive(Debug)]
pub(crate) struct RawMerge {
    /// `"` and the prefix: how a copied profile member's key starts.
    quoted_prefix: Vec<u8>,
    prefix_len: usize,
    /// The marker's name, and the marker as written: `"name":false`, `"name":true`.
    marker_name: String,
    marker: [Vec<u8>; 2],
    fields: Option<Vec<String>>,
    /// The loaded click's members, then the profile's copied ones, each in name order.
    click: Vec<Member>,
    profile: Vec<Member>,
    /// Whether the loaded click has a profile.
    matched: bool,
}

/// The value an output field comes from.
#[derive(Clone, Copy)]
enum Source {
    Click(Member),
    Profile(Member),
    Matched,
}

impl RawMerge {
    /// The merge for this config, `None` if the prefix or the marker's name needs an
    /// escape in JSON: then its text and its bytes differ, and serde_json does it all.
    pub(crate) fn new(
        prefix: &str,
        matched_field: &str,
        fields: Option<&[String]>,
    ) -> Option<Self> {
        let plain = |name: &str| !name.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\');
        if !plain(prefix) || !plain(matched_field) {
            return None;
        }
        let marker = |value: &str| format!("\"{matched_field}\":{value}").into_bytes();
        Some(Self {
            quoted_prefix: format!("\"{prefix}").into_bytes(),
            prefix_len: prefix.len(),
            marker_name: matched_field.to_owned(),
            marker: [marker("false"), marker("true")],
            fields: fields.map(<[String]>::to_vec),
            click: Vec::new(),
            profile: Vec::new(),
            matched: false,
        })
    }

    /// Takes the click and its profile row (`None`: no profile) if both are in the form
    /// serde_json writes; false leaves them to serde_json.
    pub(crate) fn load(&mut self, click: &[u8], profile: Option<&[u8]>) -> bool {
        if !json::canonical_members(click, &mut self.click) {
            return false;
        }
        match profile {
            None => self.profile.clear(),
            Some(row) => {
                if !json::canonical_members(row, &mut self.profile) {
                    return false;
                }
                json::sort_members(row, &mut self.profile);
                if let Some(wanted) = &self.fields {
                    let wanted =
                        |m: &Member| wanted.iter().any(|name| name.as_bytes() == m.key(row));
                    self.profile.retain(wanted);
                }
            }
        }
        json::sort_members(click, &mut self.click);
        self.matched = profile.is_some();
        true
    }

    fn prefix(&self) -> &[u8] {
        &self.quoted_prefix[1..]
    }

    /// The key the output field `name` gives the loaded click (`row` its profile, empty
    /// for none), as `lib.rs` keys it: a string's text, another value's JSON, empty
    /// without the field.
    pub(crate) fn key_of<'a>(&self, name: &str, click: &'a [u8], row: &'a [u8]) -> Cow<'a, [u8]> {
        if name == self.marker_name {
            return Cow::Borrowed(if self.matched { b"true" } else { b"false" });
        }
        let name = name.as_bytes();
        let copied = name.strip_prefix(self.prefix()).and_then(|name| {
            self.profile
                .iter()
                .find(|m| m.key(row) == name)
                .map(|m| m.value(row))
        });
        let value = copied.or_else(|| {
            self.click
                .iter()
                .find(|m| m.key(click) == name)
                .map(|m| m.value(click))
        });
        match value {
            None => Cow::Borrowed(b""),
            Some([b'"', text @ .., b'"']) if !text.contains(&b'\\') => Cow::Borrowed(text),
            Some(string @ [b'"', ..]) => {
                let text: String =
                    serde_json::from_slice(string).expect("a canonical member is valid JSON");
                Cow::Owned(text.into_bytes())
            }
            Some(other) => Cow::Borrowed(other),
        }
    }

    /// Writes the loaded click enriched: the members of `click` and `row` (its profile,
    /// empty for none) and the marker, in name order, compact.
    pub(crate) fn write(&self, click: &[u8], row: &[u8], out: &mut ValueWriter<'_>) {
        let mut separator = b"{";
        self.merged(click, row, |source| {
            out.extend(separator);
            separator = b",";
            match source {
                Source::Click(m) => out.extend(m.raw(click)),
                Source::Profile(m) if self.prefix_len == 0 => out.extend(m.raw(row)),
                Source::Profile(m) => {
                    out.extend(&self.quoted_prefix);
                    out.extend(&m.raw(row)[1..]);
                }
                Source::Matched => out.extend(&self.marker[usize::from(self.matched)]),
            }
        });
        out.extend(b"}");
    }

    /// Calls `each` with the source of every output field in name order: the click's
    /// and the profile's members merged (the profile's replacing the click's of the
    /// same name), the marker placed among them (replacing any of its name).
    fn merged(&self, click: &[u8], row: &[u8], mut each: impl FnMut(Source)) {
        let marker = self.marker_name.as_bytes();
        let mut marker_due = true;
        let (mut c, mut p) = (self.click.iter().peekable(), self.profile.iter().peekable());
        loop {
            let next = match (c.peek(), p.peek()) {
                (None, None) => break,
                (Some(_), None) => Source::Click(*c.next().expect("peeked")),
                (None, Some(_)) => Source::Profile(*p.next().expect("peeked")),
                (Some(cm), Some(pm)) => match self.cmp_copied(pm.key(row), cm.key(click)) {
                    Ordering::Less => Source::Profile(*p.next().expect("peeked")),
                    Ordering::Greater => Source::Click(*c.next().expect("peeked")),
                    Ordering::Equal => {
                        c.next();
                        Source::Profile(*p.next().expect("peeked"))
                    }
                },
            };
            if marker_due {
                let order = match next {
                    Source::Click(m) => m.key(click).cmp(marker),
                    Source::Profile(m) => self.cmp_copied(m.key(row), marker),
                    Source::Matched => unreachable!("the marker comes from no list"),
                };
                if order.is_ge() {
                    each(Source::Matched);
                    marker_due = false;
                    if order.is_eq() {
                        continue;
                    }
                }
            }
            each(next);
        }
        if marker_due {
            each(Source::Matched);
        }
    }

    /// Compares a copied profile field's output name (the prefix, then `name`) with `other`.
    fn cmp_copied(&self, name: &[u8], other: &[u8]) -> Ordering {
        let prefix = self.prefix();
        match other.strip_prefix(prefix) {
            Some(rest) => name.cmp(rest),
            None => prefix.cmp(other),
        }
    }
}
