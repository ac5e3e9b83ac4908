//! Zero-copy views of the records of an input batch.
//!
//! [`Records::new`] checks every offset of a packed batch once, so that reading a
//! record afterwards is plain slicing: keys and values borrow the batch's `data`.

use crate::error::Error;
use crate::packed::{Batch, Entry, Header};
use crate::ports::Input;

/// One record of a batch, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The Kafka key, `None` for a record without one.
    pub key: Option<&'a [u8]>,
    /// The Kafka value; empty for a tombstone.
    pub value: &'a [u8],
    /// Event time, epoch milliseconds.
    pub timestamp: i64,
    /// This record's headers in order (their `entry` is the record's index).
    pub headers: &'a [Header],
    /// True for a record without a value (Kafka's null value, a tombstone): only an
    /// operator whose job file sets `tombstones = true` is handed such records marked;
    /// to others they come with an empty value.
    pub tombstone: bool,
}

impl<'a> Record<'a> {
    /// A record without headers, e.g. to feed an operator natively.
    pub fn new(key: Option<&'a [u8]>, value: &'a [u8], timestamp: i64) -> Self {
        Self {
            key,
            value,
            timestamp,
            headers: &[],
            tombstone: false,
        }
    }

    /// A tombstone without headers: a record of `key` without a value.
    pub fn without_value(key: Option<&'a [u8]>, timestamp: i64) -> Self {
        Self {
            key,
            value: &[],
            timestamp,
            headers: &[],
            tombstone: true,
        }
    }

    /// The value as a batch stores it: `None` for a tombstone.
    pub(crate) fn stored_value(&self) -> Option<&'a [u8]> {
        (!self.tombstone).then_some(self.value)
    }

    /// The value of the first header with this name.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|header| header.name == name)
            .map(|header| header.value.as_slice())
    }
}

/// The records of one input batch, in arrival order, and the input they came from.
///
/// Cheap to copy; iterate it with `for record in records` or [`Records::iter`].
#[derive(Clone, Copy, Debug)]
pub struct Records<'a> {
    input: Input,
    data: &'a [u8],
    entries: &'a [Entry],
    /// Ordered by `entry`, so that each record's headers are one sub-slice.
    headers: &'a [Header],
}

impl<'a> Records<'a> {
    /// Checks a batch's offsets and header order and views its records, as a batch of
    /// the first input.
    ///
    /// Fails, naming the record, if an offset points outside `data` or a header names
    /// a record the batch does not have, or if headers are not ordered by record
    /// (use [`sort_headers`] first for a batch that may be out of order).
    pub fn new(batch: &'a Batch) -> Result<Self, Error> {
        Self::from_parts(&batch.data, &batch.entries, &batch.headers)
    }

    pub(crate) fn from_parts(
        data: &'a [u8],
        entries: &'a [Entry],
        headers: &'a [Header],
    ) -> Result<Self, Error> {
        for (index, entry) in entries.iter().enumerate() {
            if entry.has_key {
                check_range(data, index, "key", entry.key_offset, entry.key_len)?;
            }
            if !entry.is_tombstone() {
                check_range(data, index, "value", entry.value_offset, entry.value_len)?;
            }
        }
        let mut previous = 0;
        for header in headers {
            if header.entry as usize >= entries.len() {
                return Err(Error::new(format!(
                    "input batch: header `{}` belongs to record {} but the batch has {} records",
                    header.name,
                    header.entry,
                    entries.len()
                )));
            }
            if header.entry < previous {
                return Err(Error::new(format!(
                    "input batch: header `{}` of record {} follows a header of record {}; \
                     headers must be ordered by record",
                    header.name, header.entry, previous
                )));
            }
            previous = header.entry;
        }
        Ok(Self {
            input: Input::FIRST,
            data,
            entries,
            headers,
        })
    }

    /// The same records, as a batch of `input`.
    pub(crate) fn of_input(self, input: Input) -> Self {
        Self { input, ..self }
    }

    /// The input the batch came from: compare it with the [`Input`]s
    /// [`Config::input`](crate::Config::input) gave `init`.
    pub fn input(&self) -> Input {
        self.input
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The record at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<Record<'a>> {
        let entry = self.entries.get(index)?;
        let start = self.headers.partition_point(|h| (h.entry as usize) < index);
        let end = start + self.headers[start..].partition_point(|h| h.entry as usize == index);
        Some(self.record(entry, &self.headers[start..end]))
    }

    /// The records in arrival order.
    pub fn iter(&self) -> RecordIter<'a> {
        RecordIter {
            records: *self,
            next: 0,
            next_header: 0,
        }
    }

    fn record(&self, entry: &Entry, headers: &'a [Header]) -> Record<'a> {
        let key = entry.has_key.then(|| {
            let start = entry.key_offset as usize;
            &self.data[start..start + entry.key_len as usize]
        });
        let tombstone = entry.is_tombstone();
        let start = entry.value_offset as usize;
        Record {
            key,
            value: if tombstone { &[] } else { &self.data[start..start + entry.value_len as usize] },
            timestamp: entry.timestamp,
            headers,
            tombstone,
        }
    }
}

impl<'a> IntoIterator for Records<'a> {
    type Item = Record<'a>;
    type IntoIter = RecordIter<'a>;

    fn into_iter(self) -> RecordIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &Records<'a> {
    type Item = Record<'a>;
    type IntoIter = RecordIter<'a>;

    fn into_iter(self) -> RecordIter<'a> {
        self.iter()
    }
}

/// Iterates the records of a batch in arrival order.
#[derive(Clone, Debug)]
pub struct RecordIter<'a> {
    records: Records<'a>,
    next: usize,
    next_header: usize,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Record<'a>;

    fn next(&mut self) -> Option<Record<'a>> {
        let entry = self.records.entries.get(self.next)?;
        let headers = self.records.headers;
        let start = self.next_header;
        let mut end = start;
        while end < headers.len() && headers[end].entry as usize == self.next {
            end += 1;
        }
        self.next += 1;
        self.next_header = end;
        Some(self.records.record(entry, &headers[start..end]))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.records.len() - self.next;
        (left, Some(left))
    }
}

impl ExactSizeIterator for RecordIter<'_> {}

/// Orders a batch's headers by record, keeping the order of each record's headers.
/// The host sends them ordered; this is for batches built by hand.
pub fn sort_headers(batch: &mut Batch) {
    batch.headers.sort_by_key(|header| header.entry);
}

fn check_range(data: &[u8], index: usize, part: &str, offset: u32, len: u32) -> Result<(), Error> {
    let end = u64::from(offset) + u64::from(len);
    if end > data.len() as u64 {
        return Err(Error::new(format!(
            "input batch: record {index}'s {part} spans bytes {offset}..{end} but the batch's \
             data holds {} bytes",
            data.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(entry: u32, name: &str) -> Header {
        Header {
            entry,
            name: name.into(),
            value: name.as_bytes().to_vec(),
        }
    }

    #[test]
    fn views_keys_values_and_headers_in_order() {
        let first = Record::new(Some(b"k1"), b"v1", 10);
        let second = Record::new(None, b"v2", 20);
        let mut batch = Batch::pack(&[first, second]);
        batch.headers = vec![header(0, "a"), header(1, "b"), header(1, "c")];
        let records = Records::new(&batch).unwrap();
        let all: Vec<_> = records.iter().collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].key, Some(&b"k1"[..]));
        assert_eq!(all[0].value, b"v1");
        assert_eq!(all[0].header("a"), Some(&b"a"[..]));
        assert_eq!(all[1].key, None);
        assert_eq!(all[1].timestamp, 20);
        assert_eq!(all[1].headers.len(), 2);
        assert_eq!(records.get(1), Some(all[1]));
        assert_eq!(records.get(2), None);
    }

    #[test]
    fn rejects_offsets_outside_data() {
        let mut batch = Batch::pack(&[Record::new(Some(b"k"), b"value", 0)]);
        batch.entries[0].value_len = 100;
        let error = Records::new(&batch).unwrap_err();
        assert!(
            error
                .message()
                .contains("record 0's value spans bytes 1..101"),
            "{error}"
        );
    }

    #[test]
    fn rejects_unordered_or_dangling_headers() {
        let mut batch = Batch::pack(&[Record::new(None, b"a", 0), Record::new(None, b"b", 0)]);
        batch.headers = vec![header(1, "x"), header(0, "y")];
        assert!(
            Records::new(&batch)
                .unwrap_err()
                .message()
                .contains("ordered by record")
        );
        sort_headers(&mut batch);
        assert_eq!(
            Records::new(&batch).unwrap().get(0).unwrap().header("y"),
            Some(&b"y"[..])
        );
        batch.headers = vec![header(5, "z")];
        assert!(
            Records::new(&batch)
                .unwrap_err()
                .message()
                .contains("batch has 2 records")
        );
    }
}
