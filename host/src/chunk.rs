//! Keyed state as it crosses the plugin boundary and travels to the changelog and the
//! store: packed chunks of entries, each a key and either its new value or its removal.
//! Mirrors the WIT `state-chunk`, so handing a chunk to a guest is two copies, whatever
//! its length. The limits `wit/operator.wit` sets a plugin are checked here, once for a
//! job and `weir check` alike: a chunk as it crosses (`from_parts`), a round in `round`.

mod latest;
mod round;

pub(crate) use latest::latest_of;
pub(crate) use round::{Round, shown_key};

/// The data bytes of a chunk either way across the boundary: what the host asks of
/// `snapshot`, and the most it hands `restore` at once (an entry bigger alone goes alone).
pub const CHUNK_BYTES: u32 = 4 << 20;
/// The largest changelog record weir writes: librdkafka's default `message.max.bytes`
/// (1,000,000) less room for the record's framing.
const MAX_RECORD_BYTES: usize = 999_000;
/// What a changelog record adds to an entry's key and value: the stage before the key
/// (4 bytes) and the format tag before the value (1); `checkpoint::layout` writes them.
pub(crate) const RECORD_FRAMING_BYTES: usize = 5;
/// The most bytes of key and value together one entry may hold: one changelog record.
pub const MAX_ENTRY_BYTES: usize = MAX_RECORD_BYTES - RECORD_FRAMING_BYTES;
/// What the host holds per changed entry beyond its key and value (offsets, its group,
/// the duplicate check, the store's write): counted toward a round's limit, so that a
/// round of tiny entries cannot exhaust the host's memory.
pub const ENTRY_OVERHEAD_BYTES: usize = 128;
/// The most data bytes a chunk from `snapshot` can hold and be valid: several entries
/// stay within what the host asks for (at most `CHUNK_BYTES`), one within
/// `MAX_ENTRY_BYTES`. A bigger chunk is refused before it is copied out of the guest.
pub(crate) const MAX_WIRE_DATA_BYTES: usize = max(CHUNK_BYTES as usize, MAX_ENTRY_BYTES);
/// The most entries such a chunk can hold: the keys of a round are distinct, so all
/// but one (the empty key) hold a byte at least, counted per entry.
pub(crate) const MAX_WIRE_ENTRIES: usize = MAX_WIRE_DATA_BYTES + 1;

const fn max(a: usize, b: usize) -> usize {
    if a > b { a } else { b }
}

/// State entries packed like a batch: keys and values back to back in `data`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateChunk {
    data: Vec<u8>,
    entries: Vec<StateEntry>,
}

/// Where one entry's key and (unless `removed`) value lie in its chunk's `data`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StateEntry {
    pub(crate) key_offset: u32,
    pub(crate) key_len: u32,
    pub(crate) value_offset: u32,
    pub(crate) value_len: u32,
    pub(crate) removed: bool,
}

/// A chunk that breaks the contract: an entry outside the data, a removal with a
/// value, or more bytes than the host asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("state entry {index} points at bytes {offset}..{end} of a chunk of {len} data bytes")]
    OutOfBounds { index: usize, offset: u64, end: u64, len: usize },
    #[error(
        "state entry {index} is a removal with a value (value-offset {offset}, value-len {len}); \
         a removal's value-offset and value-len are 0"
    )]
    RemovalWithValue { index: usize, offset: u32, len: u32 },
    #[error(
        "the chunk's {entries} entries hold {bytes} bytes of keys and values, counted per entry \
         (entries that share bytes count each time), over the {limit}-byte limit the host asked \
         for (only a chunk of one entry may exceed it)"
    )]
    OverLimit { bytes: u64, entries: usize, limit: u32 },
    #[error(
        "the chunk holds {bytes} data bytes, of which its {entries} entries use {used}, over the \
         {limit}-byte limit the host asked for"
    )]
    Slack { bytes: usize, used: u64, entries: usize, limit: u32 },
    #[error(
        "the chunk holds {bytes} data bytes in {entries} entries, more than any valid chunk \
         ({MAX_WIRE_DATA_BYTES} bytes, {MAX_WIRE_ENTRIES} entries: several entries stay within \
         the {CHUNK_BYTES} bytes the host asks for, one within {MAX_ENTRY_BYTES}); refused before \
         it was copied out of the plugin"
    )]
    Oversized { bytes: usize, entries: usize },
}

impl StateEntry {
    /// Bytes of key and value, counted for this entry whatever it shares.
    fn bytes(&self) -> u64 {
        u64::from(self.key_len) + u64::from(self.value_len)
    }

    /// Entry `index` of a chunk of `len` data bytes lies within them, and a removal
    /// carries no value.
    fn check(&self, index: usize, len: usize) -> Result<(), ChunkError> {
        if self.removed && (self.value_offset, self.value_len) != (0, 0) {
            return Err(ChunkError::RemovalWithValue { index, offset: self.value_offset, len: self.value_len });
        }
        let within = |offset: u32, part: u32| {
            let end = u64::from(offset) + u64::from(part);
            match end > len as u64 {
                true => Err(ChunkError::OutOfBounds { index, offset: offset.into(), end, len }),
                false => Ok(()),
            }
        };
        within(self.key_offset, self.key_len)?;
        if !self.removed {
            within(self.value_offset, self.value_len)?;
        }
        Ok(())
    }
}

impl StateChunk {
    /// Whether a chunk of `bytes` data bytes and `entries` entries can be valid, known
    /// from its lengths alone: checked before either list is copied out of the guest.
    pub(crate) fn check_size(bytes: usize, entries: usize) -> Result<(), ChunkError> {
        match bytes > MAX_WIRE_DATA_BYTES || entries > MAX_WIRE_ENTRIES {
            true => Err(ChunkError::Oversized { bytes, entries }),
            false => Ok(()),
        }
    }

    /// A chunk of entries as they came over the wire, checked: every key and value lies
    /// within `data`, a removal has no value, and the entries' bytes, counted per entry,
    /// and `data` stay within `limit` unless the chunk holds one entry (whose bytes
    /// `data` then does not exceed).
    pub(crate) fn from_parts(data: Vec<u8>, entries: Vec<StateEntry>, limit: u32) -> Result<Self, ChunkError> {
        Self::check_size(data.len(), entries.len())?;
        let mut used = 0u64;
        for (index, entry) in entries.iter().enumerate() {
            entry.check(index, data.len())?;
            used += entry.bytes();
        }
        if entries.len() > 1 && used > u64::from(limit) {
            return Err(ChunkError::OverLimit { bytes: used, entries: entries.len(), limit });
        }
        if data.len() as u64 > used.max(limit.into()) {
            return Err(ChunkError::Slack { bytes: data.len(), used, entries: entries.len(), limit });
        }
        Ok(StateChunk { data, entries })
    }

    pub(crate) fn data(&self) -> &[u8] {
        &self.data
    }

    pub(crate) fn entries(&self) -> &[StateEntry] {
        &self.entries
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the chunk holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of keys and values.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Whether `data` holds exactly its entries' bytes: no more, as a chunk that crossed
    /// from a guest may (`from_parts` checks only that each entry lies within it).
    fn holds_only_its_entries(&self) -> bool {
        self.entries.iter().map(StateEntry::bytes).sum::<u64>() == self.data.len() as u64
    }

    /// Appends `key` with its new `value`, or its removal for `None`.
    ///
    /// # Panics
    /// If the chunk's data would reach 4 GiB, which offsets cannot address.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let offset = |len: usize| u32::try_from(len).expect("a state chunk's data stays below 4 GiB");
        let key_offset = offset(self.data.len());
        self.data.extend_from_slice(key);
        let value_offset = offset(self.data.len());
        self.data.extend_from_slice(value.unwrap_or_default());
        offset(self.data.len());
        self.entries.push(StateEntry {
            key_offset,
            key_len: key.len() as u32,
            value_offset: if value.is_some() { value_offset } else { 0 },
            value_len: value.map_or(0, |v| v.len() as u32),
            removed: value.is_none(),
        });
    }

    fn with_capacity(data: usize, entries: usize) -> Self {
        StateChunk { data: Vec::with_capacity(data), entries: Vec::with_capacity(entries) }
    }

    /// Each entry's key and value (`None` for a removal).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], Option<&[u8]>)> {
        (0..self.entries.len()).map(|index| self.get(index))
    }

    /// Entry `index`'s key and value (`None` for a removal).
    fn get(&self, index: usize) -> (&[u8], Option<&[u8]>) {
        let entry = &self.entries[index];
        let key = &self.data[entry.key_offset as usize..][..entry.key_len as usize];
        let value = (!entry.removed).then(|| &self.data[entry.value_offset as usize..][..entry.value_len as usize]);
        (key, value)
    }
}

/// A key's first sixteen bytes as a big-endian integer, zero-padded: ordered as the
/// bytes are, except that a short key ties with its zero-padded longer ones (a tie is
/// broken by comparing the keys whole).
///
/// Copied in pieces of fixed width: a copy of a length known only at run time is a call
/// to `memcpy`, once per entry of every sort and merge.
fn prefix(key: &[u8]) -> u128 {
    if let Some(head) = key.first_chunk::<16>() {
        return u128::from_be_bytes(*head);
    }
    let mut head = [0; 16];
    let mut at = 0;
    for width in [8, 4, 2, 1] {
        if key.len() - at >= width {
            head[at..at + width].copy_from_slice(&key[at..at + width]);
            at += width;
        }
    }
    u128::from_be_bytes(head)
}

/// A key ordered as its bytes are, mostly without a call to `memcmp`: by its first
/// sixteen bytes as one integer, then, when neither key is longer, by length (the
/// shorter is then the longer's start), else byte by byte.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OrderedKey<'a> {
    prefix: u128,
    key: &'a [u8],
}

impl<'a> OrderedKey<'a> {
    pub(crate) fn new(key: &'a [u8]) -> Self {
        OrderedKey { prefix: prefix(key), key }
    }
}

impl Ord for OrderedKey<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| match self.key.len().max(other.key.len()) <= 16 {
            true => self.key.len().cmp(&other.key.len()),
            false => self.key.cmp(other.key),
        })
    }
}

impl PartialOrd for OrderedKey<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for OrderedKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for OrderedKey<'_> {}

/// Cuts checkpointed entries into the chunks `restore` is handed, the same way for a job
/// (`state::cache` reads them) and `weir check`: in the order given, at most
/// `max_bytes` of data per chunk, an entry bigger than that alone.
#[derive(Debug)]
pub struct RestoreChunks {
    max_bytes: usize,
    chunk: StateChunk,
}

impl Default for RestoreChunks {
    /// Chunks of `CHUNK_BYTES`, as a job restores.
    fn default() -> Self {
        Self::new(CHUNK_BYTES as usize)
    }
}

impl RestoreChunks {
    pub fn new(max_bytes: usize) -> Self {
        RestoreChunks { max_bytes, chunk: StateChunk::default() }
    }

    /// Adds `key` with `value`; returns the chunk to restore before them when they do
    /// not fit in it.
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Option<StateChunk> {
        let fits = self.chunk.is_empty() || self.chunk.data_len() + key.len() + value.len() <= self.max_bytes;
        let full = (!fits).then(|| std::mem::take(&mut self.chunk));
        self.chunk.push(key, Some(value));
        full
    }

    /// The last chunk, unless no entry is left.
    pub fn finish(self) -> Option<StateChunk> {
        (!self.chunk.is_empty()).then_some(self.chunk)
    }
}

/// One operator subtask's state changes of one checkpoint, each entry with its key
/// group: checked by the subtask, written to the changelog in the checkpoint's
/// transaction, and folded into the local store once the checkpoint is committed.
#[derive(Debug, Default)]
pub struct StateChanges {
    pub(crate) stage: u32,
    chunk: StateChunk,
    /// `groups[i]` is the key group of entry `i` of `chunk`.
    groups: Vec<u32>,
    /// Once written to the changelog: what it then holds of each group written.
    pub(crate) logs: Vec<(u32, GroupLog)>,
    /// Once written: the changelog records and their bytes (keys and values).
    pub(crate) written: (u64, u64),
    /// Once written: the groups written as a new base.
    pub(crate) bases: u32,
}

impl StateChanges {
    pub(crate) fn new(stage: u32) -> Self {
        StateChanges { stage, ..StateChanges::default() }
    }

    /// Appends `key` of key group `group` with its new `value`, or its removal for `None`.
    pub(crate) fn push(&mut self, group: u32, key: &[u8], value: Option<&[u8]>) {
        self.chunk.push(key, value);
        self.groups.push(group);
    }

    /// Appends the entries of `chunk`, entry `i` in key group `groups[i]`: the chunk
    /// itself, not a copy, when nothing came before and it holds only its entries' bytes
    /// (a round is mostly one chunk, which `sort` lays out anew anyway). Copied, a
    /// chunk's data is what its entries hold, which is what a round counts against its
    /// cap.
    pub(crate) fn append(&mut self, chunk: StateChunk, groups: Vec<u32>) {
        debug_assert_eq!(chunk.len(), groups.len());
        if self.is_empty() && chunk.holds_only_its_entries() {
            (self.chunk, self.groups) = (chunk, groups);
            return;
        }
        for ((key, value), group) in chunk.iter().zip(groups) {
            self.push(group, key, value);
        }
    }

    /// Orders the entries by group and key, as the store keeps them (its memtable
    /// inserts sorted keys several times faster than random ones); the entries of a key
    /// pushed twice stay in the order pushed. Returns a key that comes twice, if one does.
    ///
    /// The chunk is laid out anew in that order, so that the changelog writer and the
    /// folder read it front to back: read through a list of indices, the folder's merge
    /// spent most of its time waiting for memory.
    pub(crate) fn sort(&mut self) -> Option<&[u8]> {
        let (order, twice) = self.order();
        let mut chunk = StateChunk::with_capacity(self.chunk.data_len(), order.len());
        let mut groups = Vec::with_capacity(order.len());
        for &(_, index) in &order {
            let (key, value) = self.chunk.get(index as usize);
            chunk.push(key, value);
            groups.push(self.groups[index as usize]);
        }
        (self.chunk, self.groups) = (chunk, groups);
        twice.map(|at| self.chunk.get(at).0)
    }

    /// Each entry's key prefix and index, by group and key, a key pushed twice in the
    /// order pushed; and the place in that order of a key's second entry, if one has two.
    ///
    /// Each group's entries (a few hundred in a round, whose groups are the few its
    /// subtask owns) are sorted on their keys' first sixteen bytes, compared as one
    /// integer; only keys alike that far are compared whole.
    fn order(&self) -> (Vec<(u128, u32)>, Option<usize>) {
        let (mut sorted, ends) = self.by_group();
        let key = |index: u32| self.chunk.get(index as usize).0;
        let mut twice = None;
        let mut start = 0;
        for end in ends {
            let group = &mut sorted[start..end as usize];
            group.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| key(a.1).cmp(key(b.1))).then(a.1.cmp(&b.1)));
            let tie = (1..group.len()).find(|&i| group[i - 1].0 == group[i].0 && key(group[i - 1].1) == key(group[i].1));
            twice = twice.or(tie.map(|i| start + i));
            start = end as usize;
        }
        (sorted, twice)
    }

    /// Each entry's key prefix and index, by group, each group's in the order pushed,
    /// and where each group's entries end: counted into their group's place when the
    /// groups are dense, as a subtask's are; else sorted, so that no count is kept per
    /// group number between the least and the greatest.
    fn by_group(&self) -> (Vec<(u128, u32)>, Vec<u32>) {
        let entries = self.chunk.iter().enumerate().map(|(index, (key, _))| (prefix(key), index as u32));
        let (Some(&low), Some(&high)) = (self.groups.iter().min(), self.groups.iter().max()) else {
            return (Vec::new(), Vec::new());
        };
        let span = (high - low) as usize + 1;
        if span > 2 * self.groups.len() + 64 {
            let mut grouped: Vec<(u128, u32)> = entries.collect();
            grouped.sort_by_key(|&(_, index)| self.groups[index as usize]);
            let group_at = |at: usize| self.groups[grouped[at].1 as usize];
            let ends = (1..=grouped.len()).filter(|&at| at == grouped.len() || group_at(at) != group_at(at - 1));
            let ends = ends.map(|at| at as u32).collect();
            return (grouped, ends);
        }
        // Each group's first place, then, as its entries are placed, its next.
        let mut next = vec![0u32; span];
        for &group in &self.groups {
            next[(group - low) as usize] += 1;
        }
        let mut at = 0;
        for count in &mut next {
            (*count, at) = (at, at + *count);
        }
        let mut grouped = vec![(0u128, 0u32); self.groups.len()];
        for (entry, &group) in entries.zip(&self.groups) {
            let place = &mut next[(group - low) as usize];
            grouped[*place as usize] = entry;
            *place += 1;
        }
        (grouped, next)
    }

    /// Each entry as `(group, key, value)`, `None` a removal: by group and key once
    /// sorted, else as pushed.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &[u8], Option<&[u8]>)> {
        self.chunk.iter().zip(&self.groups).map(|((key, value), &group)| (group, key, value))
    }

    /// The entries of key group `group` as `(key, value)`, in key order: sorted only.
    pub(crate) fn group_entries(&self, group: u32) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        let start = self.groups.partition_point(|&g| g < group);
        let end = start + self.groups[start..].partition_point(|&g| g == group);
        (start..end).map(|index| self.chunk.get(index))
    }

    /// The key groups of the entries: each once, if sorted.
    pub(crate) fn groups(&self) -> impl Iterator<Item = u32> + '_ {
        let mut last = None;
        self.entries().filter_map(move |(group, ..)| (last.replace(group) != Some(group)).then_some(group))
    }

    /// True when the round changed no key.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The number of changed keys and the bytes of their keys and values.
    pub fn size(&self) -> (u64, u64) {
        (self.groups.len() as u64, self.chunk.data_len() as u64)
    }
}

/// What the changelog holds of one stage's key group, as its writer leaves it in
/// `StateChanges::logs` for the store; when the next base is due and how it is kept
/// are `state::ledger`'s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupLog {
    /// The live base's id (0: the group has none).
    pub base: u64,
    /// Bytes of keys and values in it.
    pub base_bytes: u64,
    /// Its chunk records.
    pub base_chunks: u32,
    /// Segment records since it.
    pub segments: u32,
    /// Bytes of keys and values in them.
    pub segment_bytes: u64,
    /// The changelog holds records of one key each for the group (an older weir wrote
    /// them, or a reseed): the next base removes them.
    pub legacy: bool,
    /// Segment keys that may hold a record: the segments since the base, and those of
    /// earlier bases that no later segment has replaced yet.
    pub slots: u32,
    /// The base and the segments since may be under version 1's keys, which hold the
    /// base's id: the next base removes them by those keys.
    pub v1_keys: bool,
}

/// A stage's changed key: `(stage, (group, key, value))`, `None` a removal.
pub(crate) type StageEntry<'a> = (u32, (u32, &'a [u8], Option<&'a [u8]>));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_the_first_sixteen_bytes_zero_padded() {
        let bytes: Vec<u8> = (1..=20).collect();
        for len in 0..=bytes.len() {
            let mut head = [0; 16];
            head[..len.min(16)].copy_from_slice(&bytes[..len.min(16)]);
            assert_eq!(prefix(&bytes[..len]), u128::from_be_bytes(head), "a key of {len} bytes");
        }
    }

    #[test]
    fn pushed_entries_read_back() {
        let mut chunk = StateChunk::default();
        chunk.push(b"a", Some(b"1"));
        chunk.push(b"b", None);
        let entries: Vec<_> = chunk.iter().collect();
        assert_eq!(entries, [(&b"a"[..], Some(&b"1"[..])), (&b"b"[..], None)]);
        assert_eq!(chunk.data_len(), 3);
    }

    #[test]
    fn ordered_keys_compare_as_their_bytes() {
        let keys: [&[u8]; 12] = [
            b"", b"\x00", b"\x00\x00", b"a", b"a\x00", b"user-012345", b"user-0123456789ab", b"user-0123456789a",
            b"user-0123456789ab\x00", b"user-0123456789ab\x01", b"user-0123456789ac", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(OrderedKey::new(a).cmp(&OrderedKey::new(b)), a.cmp(b), "{a:?} against {b:?}");
            }
        }
    }

    #[test]
    fn changes_sort_by_group_and_key_and_find_a_key_given_twice() {
        let mut changes = StateChanges::new(0);
        changes.push(2, b"a", Some(b"1"));
        changes.push(1, b"c", None);
        changes.push(1, b"b", Some(b"2"));
        assert_eq!(changes.sort(), None);
        let sorted: Vec<_> = changes.entries().collect();
        assert_eq!(sorted, [(1, &b"b"[..], Some(&b"2"[..])), (1, &b"c"[..], None), (2, &b"a"[..], Some(&b"1"[..]))]);
        changes.push(1, b"b", None);
        assert_eq!(changes.sort(), Some(&b"b"[..]));
        let mut alike = StateChanges::new(0);
        for key in [&b"user-0000000000\x02"[..], b"user-00000000000", b"user-000000000000\x00", b"user-000000000000", b"user-000000000000\x01"] {
            alike.push(0, key, None);
        }
        assert_eq!(alike.sort(), None);
        let keys: Vec<_> = alike.entries().map(|(_, key, _)| key).collect();
        assert_eq!(
            keys,
            [&b"user-0000000000\x02"[..], b"user-00000000000", b"user-000000000000", b"user-000000000000\x00", b"user-000000000000\x01"],
            "as the bytes sort"
        );
        let b: Vec<_> = changes.entries().filter(|(_, key, _)| key == b"b").map(|(.., value)| value).collect();
        assert_eq!(b, [Some(&b"2"[..]), None], "in the order pushed");
        assert_eq!(StateChanges::new(0).sort(), None);
        let mut far = StateChanges::new(0);
        for (group, key) in [(703, &b"user-000000000000\x01"[..]), (700, b"z"), (703, b"user-000000000000"), (703, b"user-000000000000\x01")] {
            far.push(group, key, None);
        }
        assert_eq!(far.sort(), Some(&b"user-000000000000\x01"[..]), "a long key twice, past the first group");
        let groups: Vec<_> = far.entries().map(|(group, ..)| group).collect();
        assert_eq!(groups, [700, 703, 703, 703]);
        let mut sparse = StateChanges::new(0);
        for (group, key) in [(4_000_000_000, &b"b"[..]), (7, b"b"), (4_000_000_000, b"a"), (7, b"a"), (7, b"b")] {
            sparse.push(group, key, None);
        }
        assert_eq!(sparse.sort(), Some(&b"b"[..]), "groups far apart are sorted, not counted");
        let sorted: Vec<_> = sparse.entries().map(|(group, key, _)| (group, key)).collect();
        assert_eq!(sorted, [(7, &b"a"[..]), (7, b"b"), (7, b"b"), (4_000_000_000, b"a"), (4_000_000_000, b"b")]);
    }

    fn entry(key_offset: u32, key_len: u32, value_offset: u32, value_len: u32, removed: bool) -> StateEntry {
        StateEntry { key_offset, key_len, value_offset, value_len, removed }
    }

    #[test]
    fn wire_chunks_are_checked() {
        let data = b"kv".to_vec();
        assert!(StateChunk::from_parts(data.clone(), vec![entry(0, 1, 1, 1, false)], 2).is_ok());
        let error = StateChunk::from_parts(data.clone(), vec![entry(0, 1, 1, 9, false)], 2).unwrap_err();
        assert!(matches!(error, ChunkError::OutOfBounds { index: 0, end: 10, .. }), "{error}");
        let error = StateChunk::from_parts(data.clone(), vec![entry(u32::MAX, 2, 0, 0, true)], 2).unwrap_err();
        assert!(matches!(error, ChunkError::OutOfBounds { .. }), "offsets add up without overflow: {error}");
        let two = vec![entry(0, 1, 1, 1, false), entry(1, 1, 0, 1, false)];
        let error = StateChunk::from_parts(data.clone(), two, 1).unwrap_err();
        assert!(matches!(error, ChunkError::OverLimit { bytes: 4, entries: 2, limit: 1 }), "{error}");
        assert!(StateChunk::from_parts(data, vec![entry(0, 1, 1, 1, false)], 1).is_ok(), "one entry may exceed");
    }

    #[test]
    fn a_removal_with_a_value_is_refused_even_outside_the_data() {
        let data = b"k".to_vec();
        assert!(StateChunk::from_parts(data.clone(), vec![entry(0, 1, 0, 0, true)], 8).is_ok());
        for (offset, len) in [(0xFFFF_FF00, 16), (0, 1), (1, 0)] {
            let error = StateChunk::from_parts(data.clone(), vec![entry(0, 1, offset, len, true)], 8).unwrap_err();
            assert!(matches!(error, ChunkError::RemovalWithValue { index: 0, .. }), "{error}");
        }
    }

    #[test]
    fn entries_sharing_bytes_count_each_time() {
        // Ten keys, each aliasing the whole buffer as its value: 10 bytes of data, 110
        // counted.
        let data: Vec<u8> = (0..10).collect();
        let aliases: Vec<StateEntry> = (0..10).map(|i| entry(i, 1, 0, 10, false)).collect();
        assert!(StateChunk::from_parts(data.clone(), aliases[..1].to_vec(), 10).is_ok());
        let error = StateChunk::from_parts(data, aliases, 100).unwrap_err();
        assert!(matches!(error, ChunkError::OverLimit { bytes: 110, entries: 10, limit: 100 }), "{error}");
    }

    #[test]
    fn data_beyond_the_entries_and_the_limit_is_refused() {
        let error = StateChunk::from_parts(vec![0; 33], Vec::new(), 32).unwrap_err();
        assert!(matches!(error, ChunkError::Slack { bytes: 33, used: 0, entries: 0, limit: 32 }), "{error}");
        assert!(StateChunk::from_parts(vec![0; 32], Vec::new(), 32).is_ok(), "within the limit");
        let error = StateChunk::from_parts(vec![0; 50], vec![entry(0, 1, 1, 39, false)], 32).unwrap_err();
        assert!(matches!(error, ChunkError::Slack { bytes: 50, used: 40, .. }), "{error}");
        // Known from the lengths alone, before anything is copied.
        assert!(StateChunk::check_size(MAX_WIRE_DATA_BYTES, MAX_WIRE_ENTRIES).is_ok());
        let error = StateChunk::check_size(32 << 20, 0).unwrap_err();
        assert!(matches!(error, ChunkError::Oversized { bytes: 33_554_432, entries: 0 }), "{error}");
        assert!(StateChunk::check_size(0, MAX_WIRE_ENTRIES + 1).is_err());
    }

    #[test]
    fn a_round_keeps_a_chunk_as_it_came_only_if_it_holds_nothing_but_its_entries() {
        let padded = StateChunk::from_parts(vec![7; 32], vec![entry(0, 1, 1, 2, false)], 32).unwrap();
        let mut changes = StateChanges::new(0);
        changes.append(padded, vec![0]);
        assert_eq!(changes.size(), (1, 3), "copied: only the entry's bytes are held");
        let aliased = StateChunk::from_parts(vec![7; 3], vec![entry(0, 1, 1, 2, false), entry(0, 3, 0, 0, true)], 32).unwrap();
        let mut changes = StateChanges::new(0);
        changes.append(aliased, vec![0, 0]);
        assert_eq!(changes.size(), (2, 6), "copied: each entry's bytes once");
        let packed = StateChunk::from_parts(vec![7; 3], vec![entry(0, 1, 1, 2, false)], 32).unwrap();
        let mut changes = StateChanges::new(0);
        changes.append(packed, vec![0]);
        assert_eq!(changes.size(), (1, 3));
    }

    #[test]
    fn restore_chunks_are_cut_by_bytes_an_entry_bigger_alone() {
        let mut chunks = RestoreChunks::new(10);
        let mut cut = Vec::new();
        for (key, value) in [(&b"a"[..], &[1u8; 4][..]), (b"b", &[2; 4]), (b"c", &[3; 4]), (b"d", &[4; 20]), (b"e", &[])] {
            cut.extend(chunks.push(key, value).map(|chunk| chunk.len()));
        }
        cut.extend(chunks.finish().map(|chunk| chunk.len()));
        assert_eq!(cut, [2, 1, 1, 1], "a and b fill 10 bytes; then c, d (21 bytes, alone) and e");
        assert!(RestoreChunks::default().finish().is_none(), "no entry, no chunk");
    }
}
