//! The packed changelog records (DESIGN.md §5, "Changelog segments"): many entries of
//! one stage's key group per Kafka record, so a checkpoint costs bytes, not one record
//! per changed key.
//!
//! ```text
//! key:   ff ff ff ff 'P' version:u8 kind:u8 stage:u32be group:u32be base:u64be seq:u32be
//! value: version:u8 ‖ entries                        (a segment, or a chunk of a base)
//!        version:u8 ‖ n ‖ chunks ‖ entries ‖ bytes   (a base's end; each a varint)
//! entry: varint key_len ‖ varint (value_len + 1, or 0 for a removal) ‖ key ‖ value
//! ```
//!
//! The key's first four bytes are the reserved stage of the checkpoint record, so a
//! weir that knows only one record per key refuses these by name instead of reading
//! them as state. `base` is the id of the base a segment follows (0: none yet) or a
//! base's own, `seq` a segment's number since that base or a chunk's number in it:
//! every live record of a group has a key of its own, and a base's writer knows the
//! keys of what it replaces, to remove them (tombstones) in the same transaction.

/// The prefix of every packed record's key.
const PREFIX: &[u8] = b"\xff\xff\xff\xffP";
const VERSION: u8 = 1;
/// Bytes of a packed record's key.
#[cfg(test)]
const KEY_BYTES: usize = PREFIX.len() + 2 + 4 + 4 + 8 + 4;
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

/// A packed record's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedKey {
    pub(crate) kind: Kind,
    pub(crate) stage: u32,
    pub(crate) group: u32,
    pub(crate) base: u64,
    pub(crate) seq: u32,
}

impl PackedKey {
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(PREFIX);
        out.push(VERSION);
        out.push(self.kind.tag());
        out.extend_from_slice(&self.stage.to_be_bytes());
        out.extend_from_slice(&self.group.to_be_bytes());
        out.extend_from_slice(&self.base.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
    }

    /// The key if it is a packed record's (`None`: another kind of record); an error
    /// names what is wrong with one that starts like it.
    pub(crate) fn parse(key: &[u8]) -> Option<Result<PackedKey, String>> {
        let rest = key.strip_prefix(PREFIX)?;
        Some(Self::parse_rest(rest).ok_or_else(|| format!("a packed record key of {} bytes that weir cannot read", key.len())))
    }

    fn parse_rest(rest: &[u8]) -> Option<PackedKey> {
        let (&[version, tag], rest) = rest.split_first_chunk::<2>()?;
        if version != VERSION || rest.len() != 4 + 4 + 8 + 4 {
            return None;
        }
        let u32_at = |at: usize| u32::from_be_bytes(rest[at..at + 4].try_into().expect("4 bytes"));
        Some(PackedKey {
            kind: Kind::from_tag(tag)?,
            stage: u32_at(0),
            group: u32_at(4),
            base: u64::from_be_bytes(rest[8..16].try_into().expect("8 bytes")),
            seq: u32_at(16),
        })
    }
}

/// True for the key of a packed record (tests look for them).
pub fn is_packed_key(key: &[u8]) -> bool {
    key.starts_with(PREFIX)
}

/// Packs entries into one record's value.
#[derive(Debug, Default)]
pub(crate) struct EntriesValue {
    value: Vec<u8>,
    entries: usize,
}

impl EntriesValue {
    /// Adds `key` with its new `value`, or its removal for `None`.
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        if self.value.is_empty() {
            self.value.push(VERSION);
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

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.value
    }

    pub(crate) fn clear(&mut self) {
        self.value.clear();
        self.entries = 0;
    }
}

/// A key and its value (`None`: removed), borrowed from a packed value.
pub(crate) type PackedEntry<'a> = (&'a [u8], Option<&'a [u8]>);

/// The entries of a segment's or a base chunk's value, each checked against its bounds.
pub(crate) fn entries(value: &[u8]) -> Result<Vec<PackedEntry<'_>>, String> {
    let Some((&VERSION, mut rest)) = value.split_first() else {
        return Err(format!("a packed value of {} bytes whose version is not {VERSION}", value.len()));
    };
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
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![VERSION];
        for field in [self.n, u64::from(self.chunks), self.entries, self.bytes] {
            put_varint(&mut out, field);
        }
        out
    }

    pub(crate) fn decode(value: &[u8]) -> Result<BaseEnd, String> {
        let bad = || format!("a base's end of {} bytes that weir cannot read", value.len());
        let Some((&VERSION, mut rest)) = value.split_first() else { return Err(bad()) };
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
    use crate::state::MAX_ENTRY_BYTES;

    #[test]
    fn keys_round_trip_and_others_are_not_packed() {
        let key = PackedKey { kind: Kind::BaseChunk, stage: 3, group: 127, base: u64::MAX - 1, seq: 9 };
        let mut bytes = Vec::new();
        key.encode_into(&mut bytes);
        assert_eq!(bytes.len(), KEY_BYTES);
        assert!(is_packed_key(&bytes));
        assert_eq!(PackedKey::parse(&bytes).unwrap().unwrap(), key);
        assert!(PackedKey::parse(b"\xff\xff\xff\xffcheckpoint").is_none(), "the checkpoint record's key");
        assert!(PackedKey::parse(b"\0\0\0\0user").is_none(), "a key's own record");
        assert!(PackedKey::parse(&bytes[..bytes.len() - 1]).unwrap().is_err(), "cut short");
        bytes[6] = b'x';
        assert!(PackedKey::parse(&bytes).unwrap().is_err(), "an unknown kind");
    }

    #[test]
    fn entries_round_trip_with_removals_and_empty_values() {
        let mut packed = EntriesValue::default();
        packed.push(b"a", Some(b"1"));
        packed.push(b"", None);
        packed.push(&[7; 300], Some(b""));
        let read = entries(packed.bytes()).unwrap();
        assert_eq!(read, [(&b"a"[..], Some(&b"1"[..])), (&b""[..], None), (&[7u8; 300][..], Some(&b""[..]))]);
        for cut in 1..packed.bytes().len() {
            let _ = entries(&packed.bytes()[..cut]); // never panics
        }
        assert!(entries(&packed.bytes()[..packed.bytes().len() - 1]).is_err());
        assert!(entries(&[VERSION, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0]).is_err(), "a length past memory");
        assert!(entries(b"").is_err() && entries(&[2]).is_err(), "no version, or another");
    }

    #[test]
    fn a_base_end_round_trips() {
        let end = BaseEnd { n: 1 << 40, chunks: 3, entries: 70_000, bytes: 9 << 20 };
        assert_eq!(BaseEnd::decode(&end.encode()).unwrap(), end);
        let mut longer = end.encode();
        longer.push(0);
        assert!(BaseEnd::decode(&longer).is_err());
    }

    #[test]
    fn the_largest_entry_fits_one_record() {
        let mut packed = EntriesValue::default();
        let value = vec![0; MAX_ENTRY_BYTES - 1];
        packed.push(b"k", Some(&value));
        // librdkafka's default message.max.bytes is 1,000,000, with room for framing.
        assert!(packed.bytes().len() + KEY_BYTES < 999_100, "{}", packed.bytes().len());
    }
}
