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
        self.entries.iter().map(|entry| {
            let key = &self.data[entry.key_offset as usize..][..entry.key_len as usize];
            let value = (!entry.removed).then(|| &self.data[entry.value_offset as usize..][..entry.value_len as usize]);
            (key, value)
        })
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
