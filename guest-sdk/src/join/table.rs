//! [`Table`]: the table side of a stream–table join, the latest row per key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::record::Record;
use crate::state::{Changes, Drained, Keyed, KeyedState};

/// The latest row of each key of a table input (a compacted topic read as a table),
/// looked up by the stream records of that key: the state of a stream–table join.
///
/// A table input delivers its updates as records: the key is the table key, the value
/// the row, and an empty value removes the key (a tombstone). [`update`](Table::update)
/// applies one; [`lookup`](Table::lookup) finds the row of a stream record's key. At a
/// job's first start the host delivers the whole table before any stream record, so
/// the first stream records already find every row; after a restore the rows come back
/// from the checkpoint. Rows are kept as `V`: the row's bytes (`Vec<u8>`), or what the
/// operator parses them into, once per update rather than once per lookup.
///
/// As keyed state, a key's entry is its row; a checkpoint writes the keys updated or
/// removed since the last one.
///
/// ```
/// use weir_guest::join::Table;
/// use weir_guest::Record;
///
/// let mut users = Table::<Vec<u8>>::default();
/// users.update(&Record::new(Some(b"u1"), br#"{"name":"Ada"}"#, 1), <[u8]>::to_vec);
/// let click = Record::new(Some(b"u1"), br#"{"page":"/"}"#, 2);
/// assert_eq!(users.lookup(&click).map(Vec::as_slice), Some(&br#"{"name":"Ada"}"#[..]));
/// users.update(&Record::new(Some(b"u1"), b"", 3), <[u8]>::to_vec); // a tombstone
/// assert!(users.lookup(&click).is_none());
/// ```
#[derive(Debug)]
pub struct Table<V = Vec<u8>> {
    rows: Keyed<V>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Self {
            rows: Keyed::default(),
        }
    }
}

impl<V> Table<V> {
    /// Applies an update of the table input: `record`'s key (the empty key for none)
    /// now holds `row(value)`, or nothing if the value is empty or missing (a
    /// tombstone, for which `row` is not called).
    pub fn update(&mut self, record: &Record<'_>, row: impl FnOnce(&[u8]) -> V) {
        let key = record.key.unwrap_or_default();
        if record.value.is_empty() {
            self.rows.remove(key);
        } else {
            self.rows.insert(key, row(record.value));
        }
    }

    /// The row of the stream record's key (the empty key for none), if the table has one.
    pub fn lookup(&self, record: &Record<'_>) -> Option<&V> {
        self.get(record.key.unwrap_or_default())
    }

    /// The row of `key`, if the table has one.
    pub fn get(&self, key: &[u8]) -> Option<&V> {
        self.rows.get(key)
    }

    /// Sets the row of `key` and returns the one it replaces.
    pub fn insert(&mut self, key: &[u8], row: V) -> Option<V> {
        self.rows.insert(key, row)
    }

    /// Removes the row of `key` and returns it.
    pub fn remove(&mut self, key: &[u8]) -> Option<V> {
        self.rows.remove(key)
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when the table holds no row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every key with its row, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.rows.iter()
    }
}

impl<V: Serialize + DeserializeOwned + 'static> KeyedState for Table<V> {
    type Entry = V;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        self.rows.drain_changes(changes)
    }

    fn restore_entry(&mut self, key: &[u8], row: V) -> Result<(), Error> {
        self.rows.restore_entry(key, row)
    }
}
