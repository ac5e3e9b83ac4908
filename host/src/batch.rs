//! The packed batch: the unit records travel in from source to operators to sink.
//! It mirrors the WIT `batch` (one data buffer, flat offset entries, rare headers
//! kept apart) so handing it to a Wasm operator is a few copies, whatever its length.

use std::fmt;

/// The most data bytes one batch can hold: offsets on the wire are `u32`.
/// Producers of batches cap them far below this (by records and bytes).
pub const MAX_DATA_BYTES: usize = u32::MAX as usize;

/// A batch of records in arrival order.
///
/// Record `i` is `entries[i]`: its key and value are ranges of `data`, and its
/// headers are the contiguous run of `headers` whose `entry` is `i`, in order.
#[derive(Clone, Default)]
pub struct Batch {
    data: Vec<u8>,
    entries: Vec<Entry>,
    /// Sorted by `entry` (stable: a record's headers keep their order).
    headers: Vec<Header>,
}

/// Where one record's parts lie in its batch's `data`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) has_key: bool,
    pub(crate) key_offset: u32,
    pub(crate) key_len: u32,
    pub(crate) value_offset: u32,
    pub(crate) value_len: u32,
    pub(crate) timestamp: i64,
}

/// A header of the record at index `entry`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) entry: u32,
    pub(crate) name: String,
    pub(crate) value: Vec<u8>,
}

/// A borrowed view of one record of a [`Batch`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub key: Option<&'a [u8]>,
    pub value: &'a [u8],
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
    headers: &'a [Header],
}

/// Why parts received from outside (a plugin's output) do not form a batch.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error(
        "record {index} points at bytes {start}..{end} but the batch has {data_len} data bytes"
    )]
    OutOfBounds {
        index: usize,
        start: u64,
        end: u64,
        data_len: usize,
    },
    #[error("a header names record {entry} but the batch has {records} records")]
    HeaderOutOfBounds { entry: u32, records: usize },
    #[error(
        "the batch holds {data_len} data bytes, more than the {MAX_DATA_BYTES} a batch can address"
    )]
    TooLarge { data_len: usize },
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch with room for `records` records and `data_bytes` bytes of keys and values.
    pub fn with_capacity(records: usize, data_bytes: usize) -> Self {
        Self {
            data: Vec::with_capacity(data_bytes),
            entries: Vec::with_capacity(records),
            headers: Vec::new(),
        }
    }

    /// Appends a record.
    ///
    /// # Panics
    /// If the batch's data would exceed [`MAX_DATA_BYTES`]: callers bound batch sizes.
    pub fn push(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: i64,
        headers: &[(&str, &[u8])],
    ) {
        let key_len = key.map_or(0, <[u8]>::len);
        let needed = self.data.len() + key_len + value.len();
        assert!(
            needed <= MAX_DATA_BYTES,
            "batch data would reach {needed} bytes, over the {MAX_DATA_BYTES}-byte cap of a batch"
        );
        let index =
            u32::try_from(self.entries.len()).expect("a batch holds fewer than 2^32 records");
        let (has_key, key_offset) = match key {
            Some(key) => {
                let offset = self.data.len() as u32;
                self.data.extend_from_slice(key);
                (true, offset)
            }
            None => (false, 0),
        };
        let value_offset = self.data.len() as u32;
        self.data.extend_from_slice(value);
        self.entries.push(Entry {
            has_key,
            key_offset,
            key_len: key_len as u32,
            value_offset,
            value_len: value.len() as u32,
            timestamp,
        });
        self.headers
            .extend(headers.iter().map(|(name, value)| Header {
                entry: index,
                name: (*name).to_owned(),
                value: value.to_vec(),
            }));
    }

    /// Appends a copy of a record, e.g. one taken from another batch.
    pub fn push_record(&mut self, record: RecordRef<'_>) {
        let headers: Vec<(&str, &[u8])> = record.headers().collect();
        self.push(record.key, record.value, record.timestamp, &headers);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of keys and values held, the measure producers cap batches by.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Record `index`.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn get(&self, index: usize) -> RecordRef<'_> {
        let entry = &self.entries[index];
        RecordRef {
            key: entry
                .has_key
                .then(|| self.slice(entry.key_offset, entry.key_len)),
            value: self.slice(entry.value_offset, entry.value_len),
            timestamp: entry.timestamp,
            headers: self.headers_of(index),
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> + '_ {
        (0..self.entries.len()).map(|index| self.get(index))
    }

    /// Empties the batch, keeping its allocations for reuse.
    pub fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
        self.headers.clear();
    }

    /// The packed parts, for handing the batch to a plugin.
    pub(crate) fn parts(&self) -> (&[u8], &[Entry], &[Header]) {
        (&self.data, &self.entries, &self.headers)
    }

    /// Assembles a batch from packed parts received from outside, checking every
    /// offset so that later accessors cannot panic.
    pub(crate) fn from_parts(
        data: Vec<u8>,
        mut entries: Vec<Entry>,
        mut headers: Vec<Header>,
    ) -> Result<Self, BatchError> {
        if data.len() > MAX_DATA_BYTES {
            return Err(BatchError::TooLarge {
                data_len: data.len(),
            });
        }
        for (index, entry) in entries.iter_mut().enumerate() {
            if !entry.has_key {
                // The contract asks for zeros here; whatever a guest wrote is unused.
                entry.key_offset = 0;
                entry.key_len = 0;
            }
            for (offset, len) in [
                (entry.key_offset, entry.key_len),
                (entry.value_offset, entry.value_len),
            ] {
                let end = u64::from(offset) + u64::from(len);
                if end > data.len() as u64 {
                    return Err(BatchError::OutOfBounds {
                        index,
                        start: offset.into(),
                        end,
                        data_len: data.len(),
                    });
                }
            }
        }
        if let Some(header) = headers.iter().find(|h| h.entry as usize >= entries.len()) {
            return Err(BatchError::HeaderOutOfBounds {
                entry: header.entry,
                records: entries.len(),
            });
        }
        // The contract only orders a record's own headers; accessors need them grouped.
        if !headers.is_sorted_by_key(|h| h.entry) {
            headers.sort_by_key(|h| h.entry);
        }
        Ok(Self {
            data,
            entries,
            headers,
        })
    }

    fn slice(&self, offset: u32, len: u32) -> &[u8] {
        &self.data[offset as usize..offset as usize + len as usize]
    }

    fn headers_of(&self, index: usize) -> &[Header] {
        if self.headers.is_empty() {
            return &[];
        }
        let start = self.headers.partition_point(|h| (h.entry as usize) < index);
        let end = start + self.headers[start..].partition_point(|h| h.entry as usize == index);
        &self.headers[start..end]
    }
}

impl<'a> RecordRef<'a> {
    /// The record's headers, in order.
    pub fn headers(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a [u8])> + 'a {
        self.headers
            .iter()
            .map(|h| (h.name.as_str(), h.value.as_slice()))
    }
}

/// Two batches are equal when they hold the same records in the same order,
/// however their bytes are laid out.
impl PartialEq for Batch {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Batch {}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Debug for RecordRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Record");
        s.field("key", &self.key.map(String::from_utf8_lossy))
            .field("value", &String::from_utf8_lossy(self.value))
            .field("timestamp", &self.timestamp);
        if !self.headers.is_empty() {
            let headers: Vec<_> = self
                .headers()
                .map(|(n, v)| (n, String::from_utf8_lossy(v)))
                .collect();
            s.field("headers", &headers);
        }
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_then_read_back() {
        let mut batch = Batch::new();
        batch.push(Some(b"k1"), b"v1", 10, &[]);
        batch.push(None, b"v2", 20, &[("h", b"x"), ("g", b"y")]);
        batch.push(Some(b""), b"", 30, &[("z", b"")]);
        assert_eq!(batch.len(), 3);
        let records: Vec<_> = batch.iter().collect();
        assert_eq!(records[0].key, Some(&b"k1"[..]));
        assert_eq!(records[0].value, b"v1");
        assert_eq!(records[0].headers().count(), 0);
        assert_eq!(records[1].key, None);
        assert_eq!(
            records[1].headers().collect::<Vec<_>>(),
            vec![("h", &b"x"[..]), ("g", &b"y"[..])]
        );
        assert_eq!(records[2].key, Some(&b""[..]));
        assert_eq!(records[2].timestamp, 30);
        assert_eq!(
            records[2].headers().collect::<Vec<_>>(),
            vec![("z", &b""[..])]
        );
    }

    #[test]
    fn equality_ignores_layout() {
        let mut a = Batch::new();
        a.push(Some(b"k"), b"v", 1, &[]);
        let mut b = Batch::new();
        b.push(Some(b"junk"), b"junk", 0, &[]);
        b.clear();
        b.push_record(a.get(0));
        assert_eq!(a, b);
    }

    #[test]
    fn from_parts_rejects_bad_offsets_and_groups_headers() {
        let entry = Entry {
            has_key: false,
            key_offset: 0,
            key_len: 0,
            value_offset: 2,
            value_len: 5,
            timestamp: 0,
        };
        assert!(matches!(
            Batch::from_parts(b"abc".to_vec(), vec![entry], vec![]),
            Err(BatchError::OutOfBounds { index: 0, .. })
        ));
        let keyless = Entry {
            key_offset: 9,
            key_len: 9,
            value_offset: 0,
            value_len: 1,
            ..entry
        };
        let batch = Batch::from_parts(b"a".to_vec(), vec![keyless], vec![]).unwrap();
        assert_eq!(batch.get(0).key, None);
        let ok = Entry {
            value_offset: 0,
            value_len: 1,
            ..entry
        };
        let header = |entry, name: &str| Header {
            entry,
            name: name.into(),
            value: vec![],
        };
        let batch = Batch::from_parts(
            b"a".to_vec(),
            vec![ok, ok],
            vec![header(1, "b"), header(0, "a"), header(1, "c")],
        )
        .unwrap();
        assert_eq!(
            batch.get(0).headers().map(|h| h.0).collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(
            batch.get(1).headers().map(|h| h.0).collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert!(matches!(
            Batch::from_parts(b"a".to_vec(), vec![ok], vec![header(1, "x")]),
            Err(BatchError::HeaderOutOfBounds { .. })
        ));
    }
}
