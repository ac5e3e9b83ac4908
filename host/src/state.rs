//! Keyed state as it crosses the plugin boundary and goes into checkpoints: packed
//! chunks of entries, each a key and either its new value or its removal. Mirrors the
//! WIT `state-chunk`, so handing a chunk to a guest is two copies, whatever its length.

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

/// A chunk that breaks the contract: an entry outside the data, or too much data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    #[error("state entry {index} points at bytes {offset}..{end} of a chunk of {len} data bytes")]
    OutOfBounds { index: usize, offset: u64, end: u64, len: usize },
    #[error("the chunk holds {bytes} data bytes in {entries} entries, over the {limit}-byte limit the host asked for (only a chunk of one entry may exceed it)")]
    OverLimit { bytes: usize, entries: usize, limit: u32 },
}

impl StateChunk {
    /// A chunk of entries as they came over the wire, checked: every key and value lies
    /// within `data`, and `data` stays within `limit` unless the chunk holds one entry.
    pub(crate) fn from_parts(data: Vec<u8>, entries: Vec<StateEntry>, limit: u32) -> Result<Self, ChunkError> {
        if entries.len() > 1 && data.len() > limit as usize {
            return Err(ChunkError::OverLimit { bytes: data.len(), entries: entries.len(), limit });
        }
        for (index, entry) in entries.iter().enumerate() {
            let check = |offset: u32, len: u32| {
                let end = u64::from(offset) + u64::from(len);
                if end > data.len() as u64 {
                    return Err(ChunkError::OutOfBounds { index, offset: offset.into(), end, len: data.len() });
                }
                Ok(())
            };
            check(entry.key_offset, entry.key_len)?;
            if !entry.removed {
                check(entry.value_offset, entry.value_len)?;
            }
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

/// One operator subtask's state changes of one checkpoint, each entry with its key
/// group: checked by the subtask, written to the changelog in the checkpoint's
/// transaction, and folded into the local store once the checkpoint is committed.
#[derive(Debug, Default)]
pub(crate) struct StateChanges {
    pub(crate) stage: u32,
    chunk: StateChunk,
    /// `groups[i]` is the key group of entry `i` of `chunk`.
    groups: Vec<u32>,
    /// Entry indices by group and key, once `sort` has run.
    order: Vec<u32>,
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

    /// Orders the entries by group and key, as the store keeps them (its memtable
    /// inserts sorted keys several times faster than random ones); the entries of a key
    /// pushed twice stay in the order pushed. Returns a key that comes twice, if one does.
    pub(crate) fn sort(&mut self) -> Option<&[u8]> {
        let keys: Vec<&[u8]> = self.chunk.iter().map(|(key, _)| key).collect();
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            (self.groups[a], keys[a]).cmp(&(self.groups[b], keys[b]))
        });
        let twice = order.windows(2).find(|pair| keys[pair[0] as usize] == keys[pair[1] as usize]).map(|pair| pair[0]);
        self.order = order;
        twice.map(|index| keys[index as usize])
    }

    /// Each entry as `(group, key, value)`, `None` a removal: by group and key once
    /// sorted, else as pushed.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (u32, &[u8], Option<&[u8]>)> {
        let sorted = self.order.len() == self.groups.len();
        (0..self.groups.len()).map(move |i| {
            let index = if sorted { self.order[i] as usize } else { i };
            let (key, value) = self.chunk.get(index);
            (self.groups[index], key, value)
        })
    }

    /// The key groups of the entries: each once, if sorted.
    pub(crate) fn groups(&self) -> impl Iterator<Item = u32> + '_ {
        let mut last = None;
        self.entries().filter_map(move |(group, ..)| (last.replace(group) != Some(group)).then_some(group))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The number of changed keys and the bytes of their keys and values.
    pub(crate) fn size(&self) -> (u64, u64) {
        (self.groups.len() as u64, self.chunk.data_len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let b: Vec<_> = changes.entries().filter(|(_, key, _)| key == b"b").map(|(.., value)| value).collect();
        assert_eq!(b, [Some(&b"2"[..]), None], "in the order pushed");
    }

    #[test]
    fn wire_chunks_are_checked() {
        let entry = |key_offset, key_len, value_offset, value_len, removed| StateEntry {
            key_offset,
            key_len,
            value_offset,
            value_len,
            removed,
        };
        let data = b"kv".to_vec();
        assert!(StateChunk::from_parts(data.clone(), vec![entry(0, 1, 1, 1, false)], 2).is_ok());
        let error = StateChunk::from_parts(data.clone(), vec![entry(0, 1, 1, 9, false)], 2).unwrap_err();
        assert!(matches!(error, ChunkError::OutOfBounds { index: 0, end: 10, .. }), "{error}");
        // A removal's value is not looked at.
        assert!(StateChunk::from_parts(data.clone(), vec![entry(0, 1, 7, 9, true)], 2).is_ok());
        let error = StateChunk::from_parts(data.clone(), vec![entry(u32::MAX, 2, 0, 0, true)], 2).unwrap_err();
        assert!(matches!(error, ChunkError::OutOfBounds { .. }), "{error}");
        let two = vec![entry(0, 1, 1, 1, false), entry(1, 1, 0, 1, false)];
        let error = StateChunk::from_parts(data.clone(), two, 1).unwrap_err();
        assert!(matches!(error, ChunkError::OverLimit { bytes: 2, entries: 2, limit: 1 }), "{error}");
        assert!(StateChunk::from_parts(data, vec![entry(0, 1, 1, 1, false)], 1).is_ok(), "one entry may exceed");
    }
}
