//! The packed batch: the unit records travel in from source to operators to sink.
//! It mirrors the WIT `batch` (one data buffer, flat offset entries, rare headers
//! kept apart) so handing it to a Wasm operator is a few copies, whatever its length.

use std::fmt;

/// The most data bytes one batch can hold: offsets on the wire are `u32`, and the
/// largest is [`NO_VALUE`]. Producers of batches cap them far below this (by records
/// and bytes).
pub const MAX_DATA_BYTES: usize = u32::MAX as usize - 1;

/// The value offset of a record that has no value (its value length is 0): Kafka's
/// null value, a tombstone, which on a compacted topic deletes its key. No value of a
/// batch can lie there ([`MAX_DATA_BYTES`]).
pub const NO_VALUE: u32 = u32::MAX;

/// Records and bytes ([`Batch::bytes`]: keys, values and headers) one batch holds at
/// most, the bytes bound passed by one record at most: what a source reads into a batch, and what an operator is
/// handed in one call, in a job or by `weir check`, whatever the operator before it
/// returned ([`Batch::piece_ends`]).
pub const BATCH_RECORDS: usize = 1024;
pub const BATCH_BYTES: usize = 1 << 20;

/// The latest event time a record may carry: 9999-12-31T23:59:59.999Z in epoch
/// milliseconds. Kafka refuses negative timestamps, and anything past this is
/// a plugin's arithmetic gone wrong rather than an event.
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

/// What a batch received from outside (a plugin's output) may amount to once
/// every record is copied out on its own, as routing and the sink do: entries
/// may point at the same bytes, so the data buffer's length says nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputBound {
    pub max_records: usize,
    /// Bytes of keys, values and headers, counted per record.
    pub max_bytes: u64,
}

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
    /// What `headers` holds, counted as [`header_bytes`] counts.
    header_bytes: usize,
    /// Records without a value.
    tombstones: usize,
}

/// What a header holds in a batch beyond its name and value: its entry and two owned
/// buffers. Counted toward a batch's bounds, so that records of many empty headers
/// fill a batch as their size on the host says.
const HEADER_OVERHEAD_BYTES: usize = 64;

fn header_bytes(name: &str, value: &[u8]) -> usize {
    name.len() + value.len() + HEADER_OVERHEAD_BYTES
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

impl Entry {
    fn is_tombstone(&self) -> bool {
        self.value_offset == NO_VALUE && self.value_len == 0
    }

    /// The entry with an empty value where it has none, as an operator that does not
    /// take tombstones is handed it.
    pub(crate) fn valued(self) -> Entry {
        match self.is_tombstone() {
            true => Entry { value_offset: 0, ..self },
            false => self,
        }
    }
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
    /// Empty for a record without a value ([`RecordRef::is_tombstone`]).
    pub value: &'a [u8],
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
    headers: &'a [Header],
    tombstone: bool,
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
    #[error("it holds {records} records, over the limit of {max} records per call")]
    TooManyRecords { records: usize, max: usize },
    #[error(
        "its records add up to more than {max} bytes of keys, values and headers, the limit per \
         call (each record counted in full: records may share bytes in the plugin, not on the host)"
    )]
    TooManyBytes { max: u64 },
    #[error(
        "record {index} has timestamp {timestamp}, outside the event times Kafka accepts \
         (0..={MAX_TIMESTAMP_MS} epoch milliseconds)"
    )]
    Timestamp { index: usize, timestamp: i64 },
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
            header_bytes: 0,
            tombstones: 0,
        }
    }

    /// Appends a record.
    ///
    /// # Panics
    /// If the batch's data would exceed [`MAX_DATA_BYTES`]: callers bound batch sizes.
    /// A plugin cannot reach this: [`Batch::from_parts`] refuses an output whose
    /// records, copied one by one, would exceed it, so any batch built from a
    /// part of one fits.
    pub fn push(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: i64,
        headers: &[(&str, &[u8])],
    ) {
        self.push_maybe_valued(key, Some(value), timestamp, headers);
    }

    /// Appends a record whose value may be missing (`None`: a tombstone).
    ///
    /// # Panics
    /// As [`Batch::push`].
    pub fn push_maybe_valued(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &[(&str, &[u8])],
    ) {
        let key_len = key.map_or(0, <[u8]>::len);
        let (tombstone, value) = (value.is_none(), value.unwrap_or_default());
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
        let value_offset = if tombstone { NO_VALUE } else { self.data.len() as u32 };
        self.data.extend_from_slice(value);
        self.tombstones += usize::from(tombstone);
        self.entries.push(Entry {
            has_key,
            key_offset,
            key_len: key_len as u32,
            value_offset,
            value_len: value.len() as u32,
            timestamp,
        });
        self.header_bytes += headers.iter().map(|(name, value)| header_bytes(name, value)).sum::<usize>();
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
        let value = (!record.tombstone).then_some(record.value);
        self.push_maybe_valued(record.key, value, record.timestamp, &headers);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many of its records have no value.
    pub fn tombstones(&self) -> usize {
        self.tombstones
    }

    /// Bytes of keys and values held.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// Bytes held: keys and values, and headers with what each costs beyond its name and
    /// value. The measure of [`BATCH_BYTES`].
    pub fn bytes(&self) -> usize {
        self.data.len() + self.header_bytes
    }

    /// Record `index`.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn get(&self, index: usize) -> RecordRef<'_> {
        let entry = &self.entries[index];
        let tombstone = entry.is_tombstone();
        RecordRef {
            key: entry
                .has_key
                .then(|| self.slice(entry.key_offset, entry.key_len)),
            value: if tombstone { &[] } else { self.slice(entry.value_offset, entry.value_len) },
            timestamp: entry.timestamp,
            headers: self.headers_of(index),
            tombstone,
        }
    }

    /// Where it is cut into batches within [`BATCH_RECORDS`] and [`BATCH_BYTES`], each
    /// closed by the record that fills it: the end of each piece (one, its length, when
    /// it is within them already). Records are measured one by one: an operator's output
    /// may point many records at the same bytes.
    pub fn piece_ends(&self) -> Vec<usize> {
        let (mut ends, mut records, mut bytes) = (Vec::new(), 0, 0);
        let mut headers = self.headers.iter().peekable();
        for (index, entry) in self.entries.iter().enumerate() {
            records += 1;
            bytes += entry.key_len as usize + entry.value_len as usize;
            while let Some(header) = headers.next_if(|h| h.entry as usize == index) {
                bytes += header_bytes(&header.name, &header.value);
            }
            if records >= BATCH_RECORDS || bytes >= BATCH_BYTES {
                ends.push(index + 1);
                (records, bytes) = (0, 0);
            }
        }
        if records > 0 {
            ends.push(self.len());
        }
        ends
    }

    /// A copy of the records in `range`.
    ///
    /// # Panics
    /// If `range` reaches past the batch.
    pub fn copy_of(&self, range: std::ops::Range<usize>) -> Batch {
        let mut piece = Batch::new();
        range.for_each(|index| piece.push_record(self.get(index)));
        piece
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = RecordRef<'_>> + '_ {
        (0..self.entries.len()).map(|index| self.get(index))
    }

    /// Empties the batch, keeping its allocations for reuse.
    pub fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
        self.headers.clear();
        self.header_bytes = 0;
        self.tombstones = 0;
    }

    /// The packed parts, for handing the batch to a plugin.
    pub(crate) fn parts(&self) -> (&[u8], &[Entry], &[Header]) {
        (&self.data, &self.entries, &self.headers)
    }

    /// Assembles a batch from packed parts received from outside, checking every
    /// offset so that later accessors cannot panic, every timestamp against what
    /// Kafka accepts, and the records' size against `bound` (which is itself
    /// capped at what one batch can address).
    pub(crate) fn from_parts(
        data: Vec<u8>,
        mut entries: Vec<Entry>,
        mut headers: Vec<Header>,
        bound: OutputBound,
    ) -> Result<Self, BatchError> {
        if data.len() > MAX_DATA_BYTES {
            return Err(BatchError::TooLarge {
                data_len: data.len(),
            });
        }
        let max_records = bound.max_records.min(u32::MAX as usize);
        if entries.len() > max_records {
            return Err(BatchError::TooManyRecords {
                records: entries.len(),
                max: max_records,
            });
        }
        let max_bytes = bound.max_bytes.min(MAX_DATA_BYTES as u64);
        let mut expanded = headers.iter().fold(0u64, |sum, h| {
            sum.saturating_add((h.name.len() + h.value.len()) as u64)
        });
        for (index, entry) in entries.iter_mut().enumerate() {
            check_entry(index, entry, data.len())?;
            // At most 2^32 entries of at most 2^33 bytes each: no overflow.
            expanded += u64::from(entry.key_len) + u64::from(entry.value_len);
            if expanded > max_bytes {
                break;
            }
        }
        if expanded > max_bytes {
            return Err(BatchError::TooManyBytes { max: max_bytes });
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
        let header_bytes = headers.iter().map(|h| header_bytes(&h.name, &h.value)).sum();
        let tombstones = entries.iter().filter(|entry| entry.is_tombstone()).count();
        Ok(Self {
            data,
            entries,
            headers,
            header_bytes,
            tombstones,
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

/// One entry of a batch from outside: its ranges lie in `data_len` bytes (but the
/// value of a record without one, at [`NO_VALUE`]) and its timestamp is one Kafka
/// takes. A keyless entry's key range is zeroed, as the contract asks; whatever a
/// guest wrote there is unused.
fn check_entry(index: usize, entry: &mut Entry, data_len: usize) -> Result<(), BatchError> {
    if !entry.has_key {
        entry.key_offset = 0;
        entry.key_len = 0;
    }
    let value = (!entry.is_tombstone()).then_some((entry.value_offset, entry.value_len));
    for (offset, len) in std::iter::once((entry.key_offset, entry.key_len)).chain(value) {
        let end = u64::from(offset) + u64::from(len);
        if end > data_len as u64 {
            return Err(BatchError::OutOfBounds {
                index,
                start: offset.into(),
                end,
                data_len,
            });
        }
    }
    if !(0..=MAX_TIMESTAMP_MS).contains(&entry.timestamp) {
        return Err(BatchError::Timestamp {
            index,
            timestamp: entry.timestamp,
        });
    }
    Ok(())
}

impl<'a> RecordRef<'a> {
    /// Whether it has no value (Kafka's null value, a tombstone); its `value` is empty.
    pub fn is_tombstone(&self) -> bool {
        self.tombstone
    }

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
        s.field("key", &self.key.map(String::from_utf8_lossy));
        match self.tombstone {
            true => s.field("tombstone", &true),
            false => s.field("value", &String::from_utf8_lossy(self.value)),
        };
        s.field("timestamp", &self.timestamp);
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
    fn tombstones_are_kept_apart_from_empty_values() {
        let mut batch = Batch::new();
        batch.push_maybe_valued(Some(b"gone"), None, 1, &[("h", b"x")]);
        batch.push(Some(b"kept"), b"", 2, &[]);
        let copy = batch.copy_of(0..2);
        for batch in [&batch, &copy] {
            assert_eq!(batch.tombstones(), 1);
            let records: Vec<_> = batch.iter().collect();
            assert_eq!((records[0].value, records[0].is_tombstone()), (&b""[..], true));
            assert_eq!((records[1].value, records[1].is_tombstone()), (&b""[..], false));
            assert_eq!(records[0].headers().collect::<Vec<_>>(), vec![("h", &b"x"[..])]);
        }
        let (_, entries, _) = batch.parts();
        assert_eq!(entries[0].value_offset, NO_VALUE);
        assert_eq!((entries[0].valued().value_offset, entries[1].valued()), (0, entries[1]));
        batch.clear();
        assert_eq!(batch.tombstones(), 0);
    }

    #[test]
    fn from_parts_takes_a_value_at_no_value_as_a_tombstone_only_if_empty() {
        let entries = vec![value_entry(NO_VALUE, 0, 1), value_entry(0, 1, 2)];
        let batch = Batch::from_parts(b"a".to_vec(), entries, vec![], ANY).unwrap();
        assert_eq!(batch.tombstones(), 1);
        assert!(batch.get(0).is_tombstone() && !batch.get(1).is_tombstone());
        assert!(matches!(
            Batch::from_parts(b"a".to_vec(), vec![value_entry(NO_VALUE, 1, 1)], vec![], ANY),
            Err(BatchError::OutOfBounds { index: 0, .. })
        ));
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

    const ANY: OutputBound = OutputBound {
        max_records: usize::MAX,
        max_bytes: u64::MAX,
    };

    fn value_entry(offset: u32, len: u32, timestamp: i64) -> Entry {
        Entry {
            has_key: false,
            key_offset: 0,
            key_len: 0,
            value_offset: offset,
            value_len: len,
            timestamp,
        }
    }

    #[test]
    fn from_parts_counts_aliased_bytes_once_per_record() {
        let data = vec![7u8; 1000];
        let aliased = vec![value_entry(0, 1000, 1); 300];
        let bound = OutputBound {
            max_records: 1000,
            max_bytes: 100_000,
        };
        assert!(matches!(
            Batch::from_parts(data.clone(), aliased.clone(), vec![], bound),
            Err(BatchError::TooManyBytes { max: 100_000 })
        ));
        let few = OutputBound {
            max_records: 10,
            ..ANY
        };
        assert!(matches!(
            Batch::from_parts(data.clone(), aliased.clone(), vec![], few),
            Err(BatchError::TooManyRecords {
                records: 300,
                max: 10
            })
        ));
        // Whatever the configured bound, a batch never expands past what one
        // batch can address, so copying its records out cannot panic.
        let mib = vec![0u8; 1 << 20];
        let huge = vec![value_entry(0, 1 << 20, 1); 4096];
        assert!(matches!(
            Batch::from_parts(mib, huge, vec![], ANY),
            Err(BatchError::TooManyBytes { max }) if max == MAX_DATA_BYTES as u64
        ));
        let fits = Batch::from_parts(data, aliased[..100].to_vec(), vec![], bound).unwrap();
        assert_eq!(fits.len(), 100);
    }

    #[test]
    fn from_parts_rejects_timestamps_kafka_refuses() {
        for timestamp in [i64::MIN, -1, MAX_TIMESTAMP_MS + 1, i64::MAX] {
            let entries = vec![value_entry(0, 1, 5), value_entry(0, 1, timestamp)];
            assert!(matches!(
                Batch::from_parts(b"a".to_vec(), entries, vec![], ANY),
                Err(BatchError::Timestamp { index: 1, timestamp: t }) if t == timestamp
            ));
        }
        for timestamp in [0, MAX_TIMESTAMP_MS] {
            let entries = vec![value_entry(0, 1, timestamp)];
            Batch::from_parts(b"a".to_vec(), entries, vec![], ANY).unwrap();
        }
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
            Batch::from_parts(b"abc".to_vec(), vec![entry], vec![], ANY),
            Err(BatchError::OutOfBounds { index: 0, .. })
        ));
        let keyless = Entry {
            key_offset: 9,
            key_len: 9,
            value_offset: 0,
            value_len: 1,
            ..entry
        };
        let batch = Batch::from_parts(b"a".to_vec(), vec![keyless], vec![], ANY).unwrap();
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
            ANY,
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
            Batch::from_parts(b"a".to_vec(), vec![ok], vec![header(1, "x")], ANY),
            Err(BatchError::HeaderOutOfBounds { .. })
        ));
    }
}
