//! Packs the records an operator emits into the output batch: keys and values are
//! copied once, straight into its `data`, and [`Emitter::emit_with`] writes a value
//! in place, so formatting an output record allocates nothing of its own. Records go
//! to the first output unless emitted to another ([`Emitter::emit_to`]); the list of
//! outputs per record exists only once one goes elsewhere.

use std::fmt;
use std::io;

use crate::packed::{self, Batch, Header};
use crate::ports::Output;
use crate::record::Record;

/// Collects the records an operator emits during one call, in order, each with the
/// output it goes to.
///
/// ```
/// use weir_guest::{Config, Emitter, Output};
///
/// let config = Config::default().with_outputs(["main", "late"]);
/// let late = config.output("late")?;
/// let mut out = Emitter::new();
/// out.emit(Some(b"k"), b"on time", 10);
/// out.emit_to(late, Some(b"k"), b"late", 3);
/// let emitted = out.into_emitted();
/// assert_eq!(emitted.outputs, [Output::FIRST.index(), late.index()]);
/// # Ok::<(), weir_guest::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Emitter {
    batch: Batch,
    /// Empty while every record goes to the first output; otherwise one per record.
    outputs: Vec<u8>,
}

impl Emitter {
    /// An emitter with nothing emitted yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An emitter with room for `records` records and `data_bytes` bytes of keys
    /// and values, to spare reallocations when the output size is predictable.
    pub fn with_capacity(records: usize, data_bytes: usize) -> Self {
        Self {
            batch: Batch::with_capacity(records, data_bytes),
            outputs: Vec::new(),
        }
    }

    /// Emits a record to the first output; add headers through the returned handle.
    pub fn emit(&mut self, key: Option<&[u8]>, value: &[u8], timestamp: i64) -> Emitted<'_> {
        self.emit_to(Output::FIRST, key, value, timestamp)
    }

    /// Emits a record to `output`; add headers through the returned handle.
    pub fn emit_to(
        &mut self,
        output: Output,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: i64,
    ) -> Emitted<'_> {
        self.route(output);
        let entry = self.batch.push(key, Some(value), timestamp);
        self.emitted(entry)
    }

    /// Emits a record to the first output whose value `write_value` writes in place.
    ///
    /// ```
    /// use std::fmt::Write;
    /// let mut out = weir_guest::Emitter::new();
    /// out.emit_with(Some(b"k"), 7, |value| {
    ///     write!(value, "{{\"n\":{}}}", 42).unwrap();
    /// });
    /// let batch = out.into_batch();
    /// assert_eq!(&batch.data[1..], br#"{"n":42}"#);
    /// ```
    pub fn emit_with(
        &mut self,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut ValueWriter<'_>),
    ) -> Emitted<'_> {
        self.emit_with_to(Output::FIRST, key, timestamp, write_value)
    }

    /// Emits a record to `output` whose value `write_value` writes in place.
    pub fn emit_with_to(
        &mut self,
        output: Output,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut ValueWriter<'_>),
    ) -> Emitted<'_> {
        let key_offset = key.map_or(0, |key| self.batch.append(key));
        let value_offset = self.batch.append(&[]);
        write_value(&mut ValueWriter {
            data: &mut self.batch.data,
        });
        let value_len = self.batch.data.len() - value_offset as usize;
        self.route(output);
        let entry = self.batch.push_entry(
            key.is_some(),
            key_offset,
            key.map_or(0, <[u8]>::len),
            value_offset,
            value_len,
            timestamp,
        );
        self.emitted(entry)
    }

    /// Emits a tombstone of `key` to the first output: a record without a value, which
    /// on a compacted topic deletes the key.
    pub fn tombstone(&mut self, key: &[u8], timestamp: i64) -> Emitted<'_> {
        self.tombstone_to(Output::FIRST, key, timestamp)
    }

    /// Emits a tombstone of `key` to `output`.
    pub fn tombstone_to(&mut self, output: Output, key: &[u8], timestamp: i64) -> Emitted<'_> {
        self.route(output);
        let entry = self.batch.push(Some(key), None, timestamp);
        self.emitted(entry)
    }

    /// Emits a copy of an input record to the first output, headers included.
    pub fn forward(&mut self, record: &Record<'_>) {
        self.forward_to(Output::FIRST, record);
    }

    /// Emits a copy of an input record to `output`, headers included.
    pub fn forward_to(&mut self, output: Output, record: &Record<'_>) {
        self.route(output);
        let entry = self.batch.push(record.key, record.stored_value(), record.timestamp);
        let mut emitted = self.emitted(entry);
        for header in record.headers {
            emitted = emitted.header(&header.name, &header.value);
        }
    }

    /// The number of records emitted so far.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// True when nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// The packed output batch, whatever output each record goes to.
    pub fn into_batch(self) -> Batch {
        self.batch
    }

    /// The packed output batch with the output of each record, as the WIT returns it.
    pub fn into_emitted(self) -> packed::Emitted {
        debug_assert!(self.outputs.is_empty() || self.outputs.len() == self.batch.len());
        packed::Emitted {
            batch: self.batch,
            outputs: self.outputs,
        }
    }

    /// Notes the output of the record about to be pushed. Nothing while every record
    /// goes to the first output: the common case costs one comparison.
    fn route(&mut self, output: Output) {
        if self.outputs.is_empty() {
            if output == Output::FIRST {
                return;
            }
            self.outputs.reserve(self.batch.entries.capacity().max(16));
            self.outputs.resize(self.batch.len(), Output::FIRST.index());
        }
        self.outputs.push(output.index());
    }

    fn emitted(&mut self, entry: u32) -> Emitted<'_> {
        Emitted {
            batch: &mut self.batch,
            entry,
        }
    }
}

/// The record just emitted, to give it headers.
#[derive(Debug)]
pub struct Emitted<'a> {
    batch: &'a mut Batch,
    entry: u32,
}

impl Emitted<'_> {
    /// Adds a header to the record (after those already added).
    pub fn header(self, name: &str, value: &[u8]) -> Self {
        // The record is the batch's last: headers stay ordered by record.
        debug_assert_eq!(self.entry as usize + 1, self.batch.entries.len());
        self.batch.headers.push(Header {
            entry: self.entry,
            name: name.to_owned(),
            value: value.to_vec(),
        });
        self
    }
}

/// Writes one record's value in place; it can only append, so the records
/// emitted before stay intact. Implements [`fmt::Write`] and [`io::Write`].
#[derive(Debug)]
pub struct ValueWriter<'a> {
    data: &'a mut Vec<u8>,
}

impl ValueWriter<'_> {
    /// Appends bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        crate::bytes::append(self.data, bytes);
    }

    /// Appends a signed integer in decimal, as `Display` would, without `fmt`.
    pub fn integer(&mut self, value: i64) {
        if value < 0 {
            self.data.push(b'-');
        }
        self.unsigned(value.unsigned_abs());
    }

    /// Appends an unsigned integer in decimal, as `Display` would, without `fmt`.
    pub fn unsigned(&mut self, value: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        let mut rest = value;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        crate::bytes::append(self.data, &digits[at..]);
    }

    /// Appends a JSON string literal holding `text` (as UTF-8, invalid sequences
    /// replaced by U+FFFD), escaped exactly as `serde_json` escapes strings.
    pub fn json_string(&mut self, text: &[u8]) {
        self.data.push(b'"');
        for chunk in text.utf8_chunks() {
            self.json_escaped(chunk.valid());
            if !chunk.invalid().is_empty() {
                self.data.extend_from_slice("\u{FFFD}".as_bytes());
            }
        }
        self.data.push(b'"');
    }

    fn json_escaped(&mut self, text: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = text.as_bytes();
        let mut clean_from = 0;
        for (at, &byte) in bytes.iter().enumerate() {
            let escape: &[u8] = match byte {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0x00..=0x1f => &[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(byte >> 4) as usize],
                    HEX[(byte & 0xf) as usize],
                ],
                _ => continue,
            };
            self.data.extend_from_slice(&bytes[clean_from..at]);
            self.data.extend_from_slice(escape);
            clean_from = at + 1;
        }
        self.data.extend_from_slice(&bytes[clean_from..]);
    }
}

impl fmt::Write for ValueWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        crate::bytes::append(self.data, s.as_bytes());
        Ok(())
    }
}

impl io::Write for ValueWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.data.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Records;

    #[test]
    fn packs_keys_values_and_headers() {
        let mut out = Emitter::new();
        out.emit(Some(b"k"), b"v", 1).header("h", b"x");
        out.emit(None, b"w", 2);
        out.emit_with(Some(b"key"), 3, |value| value.extend(b"in place"));
        let batch = out.into_batch();
        let records: Vec<_> = Records::new(&batch).unwrap().iter().collect();
        assert_eq!(records[0].key, Some(&b"k"[..]));
        assert_eq!(records[0].header("h"), Some(&b"x"[..]));
        assert_eq!(
            (records[1].key, records[1].value, records[1].timestamp),
            (None, &b"w"[..], 2)
        );
        assert_eq!(records[2].key, Some(&b"key"[..]));
        assert_eq!(records[2].value, b"in place");
    }

    #[test]
    fn tombstones_are_packed_without_a_value_and_forwarded_as_such() {
        let mut input = Batch::pack(&[Record::without_value(Some(b"gone"), 4), Record::new(Some(b"kept"), b"", 5)]);
        input.headers.push(Header { entry: 0, name: "h".into(), value: b"x".to_vec() });
        let mut out = Emitter::new();
        out.tombstone(b"k", 1).header("h", b"y");
        out.emit(Some(b"e"), b"", 2);
        for record in &Records::new(&input).unwrap() {
            out.forward(&record);
        }
        let batch = out.into_batch();
        assert_eq!(batch.entries[0].value_offset, packed::NO_VALUE);
        let records: Vec<_> = Records::new(&batch).unwrap().iter().collect();
        // Each record's key, whether it is a tombstone, and its timestamp; every value is empty.
        let shown: Vec<_> = records.iter().map(|r| (r.key.unwrap(), r.value.is_empty(), r.tombstone, r.timestamp)).collect();
        let expected: [(&[u8], bool, bool, i64); 4] = [(b"k", true, true, 1), (b"e", true, false, 2), (b"gone", true, true, 4), (b"kept", true, false, 5)];
        assert_eq!(shown, expected);
        assert_eq!((records[0].header("h"), records[2].header("h")), (Some(&b"y"[..]), Some(&b"x"[..])));
    }

    #[test]
    fn outputs_exist_once_a_record_goes_elsewhere() {
        let config = crate::Config::default().with_outputs(["a", "b", "c"]);
        let (b, c) = (config.output("b").unwrap(), config.output("c").unwrap());
        let mut out = Emitter::new();
        out.emit(None, b"1", 1);
        out.emit_to(Output::FIRST, None, b"2", 2);
        assert!(out.outputs.is_empty(), "all to the first output so far");
        out.emit_with_to(c, Some(b"k"), 3, |value| value.extend(b"3"));
        out.forward_to(b, &Record::new(None, b"4", 4));
        out.emit(None, b"5", 5);
        let emitted = out.into_emitted();
        assert_eq!(emitted.outputs, [0, 0, 2, 1, 0]);
        assert_eq!(emitted.batch.len(), 5);
        assert_eq!(emitted.output_of(2), 2);
    }

    #[test]
    fn integers_print_like_display() {
        for value in [0, 7, -7, 10, 1_700_000_000_000, i64::MIN, i64::MAX] {
            let mut data = Vec::new();
            ValueWriter { data: &mut data }.integer(value);
            assert_eq!(String::from_utf8(data).unwrap(), value.to_string());
        }
        let mut data = Vec::new();
        ValueWriter { data: &mut data }.unsigned(u64::MAX);
        assert_eq!(String::from_utf8(data).unwrap(), u64::MAX.to_string());
    }

    #[test]
    fn json_strings_escape_like_serde_json() {
        let samples: [&[u8]; 6] = [
            b"plain",
            b"quote\" back\\slash",
            b"\n\r\t\x08\x0c\x01\x1f\x7f",
            "unicode \u{e9}\u{1F600}".as_bytes(),
            b"bad \xff utf8",
            b"",
        ];
        for sample in samples {
            let mut data = Vec::new();
            ValueWriter { data: &mut data }.json_string(sample);
            let expected = serde_json::to_string(&String::from_utf8_lossy(sample)).unwrap();
            assert_eq!(String::from_utf8(data).unwrap(), expected);
        }
    }
}
