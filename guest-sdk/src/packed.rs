//! The packed batch, what a call emits, and the state chunk exactly as they cross the
//! component boundary (`weir:operator/types`).
//!
//! The Wasm glue lifts the host's batch straight into these types and lowers the
//! output from them; native callers (benchmarks, tests) build them with [`Batch::pack`].

use crate::error::Error;
use crate::record::Record;

/// A batch of records: every key and value back to back in `data`, one [`Entry`]
/// of offsets per record, and the rare headers apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Every key and value, back to back.
    pub data: Vec<u8>,
    /// One per record, in order.
    pub entries: Vec<Entry>,
    /// Headers of any record, each naming its record's index.
    pub headers: Vec<Header>,
}

/// The value offset of a record without a value (its value length is 0): Kafka's null
/// value, a tombstone, which on a compacted topic deletes its key. The host hands such
/// records so to an operator whose job file sets `tombstones = true` (to others with an
/// empty value), and writes any that an operator emits as tombstones.
pub const NO_VALUE: u32 = u32::MAX;

/// Where one record's key and value lie in its batch's `data`, and its event time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// False for a record without a key (then the key offset and length are 0).
    pub has_key: bool,
    /// Where the key starts in `data`.
    pub key_offset: u32,
    /// The key's length in bytes.
    pub key_len: u32,
    /// Where the value starts in `data`.
    pub value_offset: u32,
    /// The value's length in bytes.
    pub value_len: u32,
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
}

impl Entry {
    /// Whether the record has no value ([`NO_VALUE`]).
    pub fn is_tombstone(&self) -> bool {
        self.value_offset == NO_VALUE && self.value_len == 0
    }
}

/// A header of the record at index `entry` of its batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The index of the record it belongs to.
    pub entry: u32,
    /// The header's name.
    pub name: String,
    /// The header's value.
    pub value: Vec<u8>,
}

impl Batch {
    /// An empty batch with room for `records` records and `data_bytes` bytes of
    /// keys and values.
    pub fn with_capacity(records: usize, data_bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(data_bytes),
            entries: Vec::with_capacity(records),
            headers: Vec::new(),
        }
    }

    /// Packs records into one batch, in order, keeping their headers.
    ///
    /// # Panics
    /// If the keys and values add up to 4 GiB or more, which offsets cannot address.
    pub fn pack<'a>(records: impl IntoIterator<Item = &'a Record<'a>>) -> Self {
        let mut batch = Self::default();
        for record in records {
            let index = batch.push(record.key, record.stored_value(), record.timestamp);
            for header in record.headers {
                batch.headers.push(Header {
                    entry: index,
                    name: header.name.clone(),
                    value: header.value.clone(),
                });
            }
        }
        batch
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a record without headers, its value `None` for a tombstone, and returns
    /// its index.
    pub(crate) fn push(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, timestamp: i64) -> u32 {
        let (key_offset, key_len) = match key {
            Some(key) => (self.append(key), key.len()),
            None => (0, 0),
        };
        let (value_offset, value_len) = match value {
            Some(value) => (self.append(value), value.len()),
            None => (NO_VALUE, 0),
        };
        self.push_entry(key.is_some(), key_offset, key_len, value_offset, value_len, timestamp)
    }

    /// Appends bytes to `data` and returns where they start.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> u32 {
        let offset = offset_of(self.data.len());
        crate::bytes::append(&mut self.data, bytes);
        offset
    }

    /// Appends an entry whose bytes are already in `data` and returns its index.
    pub(crate) fn push_entry(
        &mut self,
        has_key: bool,
        key_offset: u32,
        key_len: usize,
        value_offset: u32,
        value_len: usize,
        timestamp: i64,
    ) -> u32 {
        // Checked here once so that every offset derived from `data.len()` fits u32.
        offset_of(self.data.len());
        let index = u32::try_from(self.entries.len())
            .expect("a packed batch holds at most u32::MAX records");
        self.entries.push(Entry {
            has_key,
            key_offset,
            key_len: key_len as u32,
            value_offset,
            value_len: value_len as u32,
            timestamp,
        });
        index
    }
}

/// What one call emits: the records, and the output each goes to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Emitted {
    /// The records, in order.
    pub batch: Batch,
    /// Empty: every record goes to the first output. Otherwise one output index per
    /// record (`outputs[i]` is record i's), each below the number of outputs.
    pub outputs: Vec<u8>,
}

impl Emitted {
    /// The index of the output record `index` goes to.
    pub fn output_of(&self, index: usize) -> u8 {
        self.outputs.get(index).copied().unwrap_or(0)
    }
}

/// State entries packed like a batch: keys and values back to back in `data`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateChunk {
    /// Every key and value, back to back.
    pub data: Vec<u8>,
    /// One per key, in order.
    pub entries: Vec<StateEntry>,
}

/// Where one state entry's key and (unless `removed`) new value lie in `data`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateEntry {
    /// Where the key starts in `data`.
    pub key_offset: u32,
    /// The key's length in bytes.
    pub key_len: u32,
    /// Where the value starts in `data` (0 for a removal).
    pub value_offset: u32,
    /// The value's length in bytes (0 for a removal).
    pub value_len: u32,
    /// True when the key's state is gone.
    pub removed: bool,
}

impl StateChunk {
    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the chunk holds no entry: the end of a snapshot round.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `key` with its new `value`, or its removal for `None`.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let key_offset = offset_of(self.data.len());
        crate::bytes::append(&mut self.data, key);
        let value_offset = offset_of(self.data.len());
        if let Some(value) = value {
            crate::bytes::append(&mut self.data, value);
        }
        offset_of(self.data.len());
        self.entries.push(StateEntry {
            key_offset,
            key_len: key.len() as u32,
            value_offset: if value.is_some() { value_offset } else { 0 },
            value_len: value.map_or(0, |v| v.len() as u32),
            removed: value.is_none(),
        });
    }

    /// Each entry's key and value (`None` for a removal), checked against `data`.
    pub fn iter(&self) -> impl Iterator<Item = Result<(&[u8], Option<&[u8]>), Error>> {
        self.entries.iter().enumerate().map(|(index, entry)| {
            let slice = |offset: u32, len: u32, what: &str| {
                let start = offset as usize;
                start
                    .checked_add(len as usize)
                    .and_then(|end| self.data.get(start..end))
                    .ok_or_else(|| {
                        Error::new(format!(
                            "state entry {index}: its {what} ({offset}+{len}) lies outside the \
                             chunk's {} data bytes",
                            self.data.len()
                        ))
                    })
            };
            let key = slice(entry.key_offset, entry.key_len, "key")?;
            if entry.removed {
                return Ok((key, None));
            }
            Ok((key, Some(slice(entry.value_offset, entry.value_len, "value")?)))
        })
    }
}

/// A position in `data` as the u32 the WIT carries. On wasm32 a buffer cannot reach
/// 4 GiB, so this only fails natively, and then an offset would silently wrap.
fn offset_of(position: usize) -> u32 {
    u32::try_from(position).expect("a packed batch's data must stay below 4 GiB")
}
