//! The packed changelog records (DESIGN.md §5, "Changelog segments"): many entries of
//! one stage's key group per Kafka record, so a checkpoint costs bytes, not one record
//! per changed key.
//!
//! ```text
//! key:   ff ff ff ff 'P' 2 kind:u8 stage:u32be group:u32be seq:u32be
//! value: 2 ‖ base:u64le ‖ entries                         (a segment, or a chunk of a base)
//!        2 ‖ base:u64le ‖ n ‖ chunks ‖ entries ‖ bytes    (a base's end; each a varint)
//! entry: varint key_len ‖ varint (value_len + 1, or 0 for a removal) ‖ key ‖ value
//! ```
//!
//! The key's first four bytes are the reserved stage of the checkpoint record, so a
//! weir that knows only one record per key refuses these by name instead of reading
//! them as state. `seq` is a segment's number since its group's base or a chunk's
//! number in it, and `base` (in the value) the id of the base a segment follows (0:
//! none yet) or a base's own. A new base's records take the keys of the old one's, and
//! the segments after it those of the segments before, so compaction drops what a base
//! replaces without a removal per record; a removal lasts `delete.retention.ms`, a day
//! by default, and one per replaced record outweighed the state itself.
//!
//! Version 1 (weir from 38ef51d to this format) put `base:u64be` in the key, before
//! `seq`, and nothing but its version before a value's entries; it is still read, and
//! its records are removed by key once a group's next base replaces them.

/// The prefix of every packed record's key.
const PREFIX: &[u8] = b"\xff\xff\xff\xffP";
/// The version written.
const VERSION: u8 = 2;
/// The version whose keys held the base's id.
pub(crate) const VERSION_1: u8 = 1;
/// Bytes of a packed record's key.
#[cfg(test)]
const KEY_BYTES: usize = PREFIX.len() + 2 + 4 + 4 + 4;
/// Bytes before a value's entries: the version and the base's id.
const VALUE_HEADER_BYTES: usize = 1 + 8;
/// The entry bytes a writer packs into one record before it starts the next; an entry
/// bigger alone (up to `MAX_ENTRY_BYTES`, which still fits one Kafka record).
pub(crate) const RECORD_FILL_BYTES: usize = 256 << 10;

/// What a packed record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Changes of one checkpoint, after base `base`.
    Segment,
    /// Chunk `seq` of base `base`: the group's whole state at a committed checkpoint.
    BaseChunk,
    /// Base `base` is complete: it has this many chunks.
    BaseEnd,
}

impl Kind {
    fn tag(self) -> u8 {
        match self {
            Kind::Segment => b's',
            Kind::BaseChunk => b'b',
            Kind::BaseEnd => b'e',
        }
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        match tag {
            b's' => Some(Kind::Segment),
            b'b' => Some(Kind::BaseChunk),
            b'e' => Some(Kind::BaseEnd),
            _ => None,
        }
    }
}

/// A packed record's key, with the base it belongs to (in the value since version 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedKey {
    pub(crate) kind: Kind,
    pub(crate) stage: u32,
    pub(crate) group: u32,
    pub(crate) base: u64,
    pub(crate) seq: u32,
}

impl PackedKey {
    /// The key weir writes: the base's id is not part of it.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(PREFIX);
        out.extend_from_slice(&[VERSION, self.kind.tag()]);
        out.extend_from_slice(&self.stage.to_be_bytes());
        out.extend_from_slice(&self.group.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
    }

    /// The key version 1 gave this record: what a removal of it names.
    pub(crate) fn encode_v1_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(PREFIX);
        out.extend_from_slice(&[VERSION_1, self.kind.tag()]);
        out.extend_from_slice(&self.stage.to_be_bytes());
        out.extend_from_slice(&self.group.to_be_bytes());
        out.extend_from_slice(&self.base.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
    }
}

/// A packed record as read: its key (with its base), its version, and what its value
/// holds after the version and base: entries, or a base's end (`None`: a removal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedRecord<'a> {
    pub(crate) key: PackedKey,
    pub(crate) version: u8,
    pub(crate) body: Option<&'a [u8]>,
}

impl<'a> PackedRecord<'a> {
    /// The record if its key is a packed record's (`None`: another kind of record); an
    /// error names what is wrong with one that starts like it.
    pub(crate) fn parse(key: &[u8], value: Option<&'a [u8]>) -> Option<Result<PackedRecord<'a>, String>> {
        let rest = key.strip_prefix(PREFIX)?;
        let bad_key = || format!("a packed record key of {} bytes that weir cannot read", key.len());
        Some(parse_key(rest).ok_or_else(bad_key).and_then(|(mut key, version)| {
            let Some(value) = value else { return Ok(PackedRecord { key, version, body: None }) };
            let bad_value = || format!("a packed value of {} bytes whose version is not {version}", value.len());
            let body = match version {
                VERSION_1 => value.strip_prefix(&[VERSION_1]).ok_or_else(bad_value)?,
                _ => {
                    let (header, body) = value.split_first_chunk::<VALUE_HEADER_BYTES>().ok_or_else(bad_value)?;
                    if header[0] != VERSION {
                        return Err(bad_value());
                    }
                    key.base = u64::from_le_bytes(header[1..].try_into().expect("8 bytes"));
                    body
                }
            };
            Ok(PackedRecord { key, version, body: Some(body) })
        }))
    }
}

/// A key after the prefix, and its version: version 2's, or version 1's with its base.
fn parse_key(rest: &[u8]) -> Option<(PackedKey, u8)> {
    let (&[version, tag], rest) = rest.split_first_chunk::<2>()?;
    let kind = Kind::from_tag(tag)?;
    let u32_at = |at: usize| u32::from_be_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
    let key = match (version, rest.len()) {
        (VERSION, 12) => PackedKey { kind, stage: u32_at(0), group: u32_at(4), base: 0, seq: u32_at(8) },
        (VERSION_1, 20) => PackedKey {
            kind,
            stage: u32_at(0),
            group: u32_at(4),
            base: u64::from_be_bytes(rest[8..16].try_into().expect("8 bytes")),
            seq: u32_at(16),
        },
        _ => return None,
    };
    Some((key, version))
}

/// The version of a packed record's key, if it is newer than this weir reads.
pub(crate) fn newer_version(key: &[u8]) -> Option<u8> {
    key.strip_prefix(PREFIX)?.first().copied().filter(|&version| version > VERSION)
}

/// True for the key of a packed record (tests look for them).
pub fn is_packed_key(key: &[u8]) -> bool {
    key.starts_with(PREFIX)
}

/// Packs entries into one record's value.
#[derive(Debug, Default)]
pub(crate) struct EntriesValue {
    /// The version, room for the base's id, then the entries.
    value: Vec<u8>,
    entries: usize,
}

impl EntriesValue {
    /// Adds `key` with its new `value`, or its removal for `None`.
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        if self.value.is_empty() {
            self.value.extend_from_slice(&[VERSION; VALUE_HEADER_BYTES]);
        }
        put_varint(&mut self.value, key.len() as u64);
        put_varint(&mut self.value, value.map_or(0, |value| value.len() as u64 + 1));
        self.value.extend_from_slice(key);
        self.value.extend_from_slice(value.unwrap_or_default());
        self.entries += 1;
    }

    /// Whether `bytes` more of key and value belong in the next record instead.
    pub(crate) fn full_for(&self, bytes: usize) -> bool {
        self.entries > 0 && self.value.len() + bytes > RECORD_FILL_BYTES
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// The record's value, its entries following base `base`.
    pub(crate) fn finish(&mut self, base: u64) -> &[u8] {
        if self.value.is_empty() {
            self.value.extend_from_slice(&[VERSION; VALUE_HEADER_BYTES]);
        }
        self.value[1..VALUE_HEADER_BYTES].copy_from_slice(&base.to_le_bytes());
        &self.value
    }

    pub(crate) fn clear(&mut self) {
        self.value.clear();
        self.entries = 0;
    }
}

/// A key and its value (`None`: removed), borrowed from a packed value.
pub(crate) type PackedEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// The entries of a segment's or a base chunk's body (`PackedRecord::body`), each
/// checked against its bounds.
pub(crate) fn entries(value: &[u8]) -> Result<Vec<PackedEntry<'_>>, String> {
    let mut rest = value;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let at = value.len() - rest.len();
        let bad = || format!("entry {} at byte {at} runs past the value's {} bytes", out.len(), value.len());
        let key_len = take_varint(&mut rest).ok_or_else(bad)?;
        let value_len = take_varint(&mut rest).ok_or_else(bad)?;
        let key_len = usize::try_from(key_len).map_err(|_| bad())?;
        let (key, after) = rest.split_at_checked(key_len).ok_or_else(bad)?;
        rest = after;
        let state = match value_len {
            0 => None,
            len => {
                let len = usize::try_from(len - 1).map_err(|_| bad())?;
                let (state, after) = rest.split_at_checked(len).ok_or_else(bad)?;
                rest = after;
                Some(state)
            }
        };
        out.push((key, state));
    }
    Ok(out)
}

/// A base's end record: the checkpoint whose state it holds and what it counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BaseEnd {
    pub(crate) n: u64,
    pub(crate) chunks: u32,
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

impl BaseEnd {
    /// The end record's value, for base `base`.
    pub(crate) fn encode(&self, base: u64) -> Vec<u8> {
        let mut out = vec![VERSION];
        out.extend_from_slice(&base.to_le_bytes());
        for field in [self.n, u64::from(self.chunks), self.entries, self.bytes] {
            put_varint(&mut out, field);
        }
        out
    }

    /// The end from its record's body (`PackedRecord::body`).
    pub(crate) fn decode(value: &[u8]) -> Result<BaseEnd, String> {
        let bad = || format!("a base's end of {} bytes that weir cannot read", value.len());
        let mut rest = value;
        let mut field = || take_varint(&mut rest).ok_or_else(bad);
        let end = BaseEnd { n: field()?, chunks: u32::try_from(field()?).map_err(|_| bad())?, entries: field()?, bytes: field()? };
        match rest.is_empty() {
            true => Ok(end),
            false => Err(bad()),
        }
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::MAX_ENTRY_BYTES;

    fn parsed(key: &[u8], value: Option<&[u8]>) -> PackedRecord<'static> {
        let (key, value): (&'static [u8], Option<&'static [u8]>) = (key.to_vec().leak(), value.map(|v| &*v.to_vec().leak()));
        PackedRecord::parse(key, value).expect("a packed key").expect("readable")
    }

    #[test]
    fn records_round_trip_and_others_are_not_packed() {
        let key = PackedKey { kind: Kind::BaseChunk, stage: 3, group: 127, base: u64::MAX - 1, seq: 9 };
        let mut bytes = Vec::new();
        key.encode_into(&mut bytes);
        assert_eq!(bytes.len(), KEY_BYTES);
        assert!(is_packed_key(&bytes));
        let mut value = EntriesValue::default();
        value.push(b"k", Some(b"v"));
        let record = parsed(&bytes, Some(value.finish(key.base)));
        assert_eq!((record.key, record.version), (key, VERSION));
        assert_eq!(entries(record.body.unwrap()).unwrap(), [(&b"k"[..], Some(&b"v"[..]))]);
        let removal = parsed(&bytes, None);
        assert_eq!((removal.key.base, removal.body), (0, None), "a removal names no base");
        assert!(PackedRecord::parse(b"\xff\xff\xff\xffcheckpoint", None).is_none(), "the checkpoint record's key");
        assert!(PackedRecord::parse(b"\0\0\0\0user", None).is_none(), "a key's own record");
        let mut newer = bytes.clone();
        newer[PREFIX.len()] = VERSION + 1;
        assert_eq!(newer_version(&newer), Some(VERSION + 1), "a newer weir's key");
        assert_eq!(newer_version(&bytes), None, "this weir's key");
        assert!(PackedRecord::parse(&newer, None).unwrap().is_err(), "a newer weir's key is not read");
        assert!(PackedRecord::parse(&bytes[..bytes.len() - 1], None).unwrap().is_err(), "cut short");
        assert!(PackedRecord::parse(&bytes, Some(&[VERSION, 1, 2])).unwrap().is_err(), "a value cut short");
        assert!(PackedRecord::parse(&bytes, Some(&[VERSION_1; 9])).unwrap().is_err(), "a value of another version");
        bytes[6] = b'x';
        assert!(PackedRecord::parse(&bytes, None).unwrap().is_err(), "an unknown kind");
    }

    #[test]
    fn version_1_records_are_read_with_the_base_in_their_key() {
        let key = PackedKey { kind: Kind::Segment, stage: 1, group: 5, base: 77, seq: 3 };
        let mut bytes = Vec::new();
        key.encode_v1_into(&mut bytes);
        assert_eq!(bytes.len(), KEY_BYTES + 8);
        let record = parsed(&bytes, Some(&[VERSION_1, 1, 2, b'k', b'v']));
        assert_eq!((record.key, record.version), (key, VERSION_1));
        assert_eq!(entries(record.body.unwrap()).unwrap(), [(&b"k"[..], Some(&b"v"[..]))]);
        assert!(PackedRecord::parse(&bytes, Some(&[VERSION, 1, 2, b'k', b'v'])).unwrap().is_err(), "a version 2 value");
    }

    #[test]
    fn entries_round_trip_with_removals_and_empty_values() {
        let mut packed = EntriesValue::default();
        packed.push(b"a", Some(b"1"));
        packed.push(b"", None);
        packed.push(&[7; 300], Some(b""));
        let value = packed.finish(9).to_vec();
        let body = &value[VALUE_HEADER_BYTES..];
        let read = entries(body).unwrap();
        assert_eq!(read, [(&b"a"[..], Some(&b"1"[..])), (&b""[..], None), (&[7u8; 300][..], Some(&b""[..]))]);
        for cut in 0..body.len() {
            let _ = entries(&body[..cut]); // never panics
        }
        assert!(entries(&body[..body.len() - 1]).is_err());
        assert!(entries(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0]).is_err(), "a length past memory");
        assert!(entries(b"").unwrap().is_empty(), "no entries");
    }

    #[test]
    fn a_base_end_round_trips() {
        let end = BaseEnd { n: 1 << 40, chunks: 3, entries: 70_000, bytes: 9 << 20 };
        let mut key = Vec::new();
        PackedKey { kind: Kind::BaseEnd, stage: 0, group: 1, base: 0, seq: 0 }.encode_into(&mut key);
        let value = end.encode(42);
        let record = parsed(&key, Some(&value));
        assert_eq!(record.key.base, 42);
        assert_eq!(BaseEnd::decode(record.body.unwrap()).unwrap(), end);
        let mut longer = record.body.unwrap().to_vec();
        longer.push(0);
        assert!(BaseEnd::decode(&longer).is_err());
    }

    #[test]
    fn the_largest_entry_fits_one_record() {
        let mut packed = EntriesValue::default();
        let value = vec![0; MAX_ENTRY_BYTES - 1];
        packed.push(b"k", Some(&value));
        // librdkafka's default message.max.bytes is 1,000,000, with room for framing.
        assert!(packed.finish(1).len() + KEY_BYTES < 999_100, "{}", packed.finish(1).len());
    }
}
