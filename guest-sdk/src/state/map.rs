//! [`KeyedMap`]: a map per key whose entries are checkpointed one by one, so a change to
//! one entry writes one entry, whatever the size of its key's map.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::collections::btree_map;
use std::ops::{Bound, RangeBounds};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Changes, Drained, KeyMap, KeyedState, Round};
use crate::error::Error;
use crate::snapshot;

/// A map from `K` to `V` per key, each entry its own state entry: a checkpoint writes
/// the entries changed since the last one (their new value or their removal), not the
/// maps that hold them. For state that grows per key (the ids a key has seen, its open
/// orders, the last value per field), where [`Keyed`](super::Keyed)`<BTreeMap<K, V>>`
/// would rewrite a key's whole map for each change.
///
/// A key's entries are ordered by `K`. Reading ([`get`](KeyedMap::get),
/// [`entries`](KeyedMap::entries)) changes nothing; every other access to an entry
/// counts as its change. An entry's state key is the routing key with the entry key
/// encoded (postcard) after it, made to hash as the routing key does, so it is kept in
/// the routing key's key group: the host needs no change. As keyed state, an entry is a
/// `V`; a change to `K`'s encoding is not upgradable.
///
/// ```
/// use weir_guest::state::KeyedMap;
///
/// let mut seen = KeyedMap::<String, i64>::default();
/// seen.insert(b"user-1", "order-7".to_owned(), 1_000);
/// seen.insert(b"user-1", "order-9".to_owned(), 1_500);
/// assert_eq!(seen.get(b"user-1", "order-7"), Some(&1_000));
/// assert_eq!(seen.remove(b"user-1", "order-7"), Some(1_000));
/// let ids: Vec<_> = seen.entries(b"user-1").map(|(id, _)| id.as_str()).collect();
/// assert_eq!(ids, ["order-9"]);
/// assert_eq!(seen.len(), 1);
/// ```
#[derive(Debug)]
pub struct KeyedMap<K, V> {
    keys: KeyMap<BTreeMap<K, Slot<V>>>,
    /// Live entries, over all keys.
    live: usize,
    /// Entries changed since the last snapshot round, each once (its slot's flag).
    changed: Vec<(Box<[u8]>, K)>,
    /// The round being handed over.
    round: Option<Round<(Box<[u8]>, K)>>,
    /// An entry key being encoded.
    scratch: Vec<u8>,
}

/// An entry, or its removal until the next round hands that over.
#[derive(Debug)]
struct Slot<V> {
    value: Option<V>,
    /// Set on the first change since the last snapshot round.
    changed: bool,
}

impl<K, V> Default for KeyedMap<K, V> {
    fn default() -> Self {
        Self {
            keys: KeyMap::default(),
            live: 0,
            changed: Vec::new(),
            round: None,
            scratch: Vec::new(),
        }
    }
}

impl<K: Ord + Clone, V> KeyedMap<K, V> {
    /// The value of `entry` under `key`, if it has one.
    pub fn get<Q>(&self, key: &[u8], entry: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.keys.get(key)?.get(entry)?.value.as_ref()
    }

    /// True when `entry` under `key` has a value.
    pub fn contains<Q>(&self, key: &[u8], entry: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.get(key, entry).is_some()
    }

    /// The value of `entry` under `key` for changing, if it has one.
    pub fn get_mut<Q>(&mut self, key: &[u8], entry: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let map = self.keys.get_mut(key)?;
        let (entry, slot) = map
            .range_mut::<Q, _>((Bound::Included(entry), Bound::Included(entry)))
            .next()?;
        let value = slot.value.as_mut()?;
        if !slot.changed {
            slot.changed = true;
            self.changed.push((key.into(), entry.clone()));
        }
        Some(value)
    }

    /// Sets `entry` under `key` to `value` and returns the value it replaces.
    pub fn insert(&mut self, key: &[u8], entry: K, value: V) -> Option<V> {
        let map = self.keys.entry_ref(key).or_default();
        match map.entry(entry) {
            btree_map::Entry::Occupied(mut occupied) => {
                if !occupied.get().changed {
                    self.changed.push((key.into(), occupied.key().clone()));
                }
                let slot = occupied.get_mut();
                slot.changed = true;
                let old = slot.value.replace(value);
                self.live += usize::from(old.is_none());
                old
            }
            btree_map::Entry::Vacant(vacant) => {
                self.changed.push((key.into(), vacant.key().clone()));
                vacant.insert(Slot {
                    value: Some(value),
                    changed: true,
                });
                self.live += 1;
                None
            }
        }
    }

    /// Removes `entry` under `key` and returns its value.
    pub fn remove<Q>(&mut self, key: &[u8], entry: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let map = self.keys.get_mut(key)?;
        let (entry, slot) = map
            .range_mut::<Q, _>((Bound::Included(entry), Bound::Included(entry)))
            .next()?;
        let old = slot.value.take()?;
        self.live -= 1;
        if !slot.changed {
            slot.changed = true;
            self.changed.push((key.into(), entry.clone()));
        }
        Some(old)
    }

    /// Keeps only the entries under `key` for which `keep` returns true.
    pub fn retain(&mut self, key: &[u8], mut keep: impl FnMut(&K, &V) -> bool) {
        let Some(map) = self.keys.get_mut(key) else {
            return;
        };
        for (entry, slot) in map.iter_mut() {
            let Some(value) = &slot.value else { continue };
            if keep(entry, value) {
                continue;
            }
            slot.value = None;
            self.live -= 1;
            if !slot.changed {
                slot.changed = true;
                self.changed.push((key.into(), entry.clone()));
            }
        }
    }

    /// The entries under `key`, ordered by entry key.
    pub fn entries(&self, key: &[u8]) -> impl Iterator<Item = (&K, &V)> + use<'_, K, V> {
        self.keys
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|(entry, slot)| Some((entry, slot.value.as_ref()?)))
    }

    /// The entries under `key` whose entry keys lie in `range`, ordered by entry key.
    ///
    /// ```
    /// use weir_guest::state::KeyedMap;
    ///
    /// let mut at = KeyedMap::<i64, &str>::default();
    /// for (time, what) in [(5, "a"), (10, "b"), (15, "c")] {
    ///     at.insert(b"k", time, what);
    /// }
    /// let middle: Vec<_> = at.range(b"k", 6..=15).map(|(_, v)| *v).collect();
    /// assert_eq!(middle, ["b", "c"]);
    /// ```
    pub fn range<Q, R>(
        &self,
        key: &[u8],
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)> + use<'_, K, V, Q, R>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
        R: RangeBounds<Q>,
    {
        self.keys
            .get(key)
            .map(|map| map.range::<Q, R>(range))
            .into_iter()
            .flatten()
            .filter_map(|(entry, slot)| Some((entry, slot.value.as_ref()?)))
    }

    /// Every entry with its key: `(key, entry key, value)`, keys in no particular
    /// order, each key's entries ordered by entry key.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &K, &V)> {
        self.keys.iter().flat_map(|(key, map)| {
            map.iter()
                .filter_map(move |(entry, slot)| Some((&key[..], entry, slot.value.as_ref()?)))
        })
    }

    /// The number of entries, over all keys.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no key has an entry.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }
}

impl<K, V> KeyedState for KeyedMap<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + 'static,
    V: Serialize + DeserializeOwned + 'static,
{
    type Entry = V;
    const SUB_KEYS: bool = true;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        let mut round = match self.round.take() {
            Some(round) => round,
            None => Round::distinct(std::mem::take(&mut self.changed)),
        };
        let Self { keys, scratch, .. } = self;
        let drained = round.hand_over(|(key, entry)| {
            let Some(map) = keys.get_mut(key) else {
                debug_assert!(
                    false,
                    "a changed entry keeps its slot until it is handed over"
                );
                return Ok(true);
            };
            let Some(slot) = map.get_mut(entry) else {
                debug_assert!(
                    false,
                    "a changed entry keeps its slot until it is handed over"
                );
                return Ok(true);
            };
            scratch.clear();
            *scratch = postcard::to_extend(entry, std::mem::take(scratch))
                .map_err(|e| Error::new(format!("state: an entry key does not encode: {e}")))?;
            let taken = match &slot.value {
                Some(value) => changes.put_under(key, scratch, value)?,
                None => changes.remove_under(key, scratch),
            };
            if taken {
                slot.changed = false;
                if slot.value.is_none() {
                    map.remove(entry);
                    if map.is_empty() {
                        keys.remove(key);
                    }
                }
            }
            Ok(taken)
        })?;
        if drained == Drained::More {
            self.round = Some(round);
        }
        Ok(drained)
    }

    fn restore_entry(&mut self, key: &[u8], value: V) -> Result<(), Error> {
        self.restore_under(key, &[], value)
    }

    fn restore_under(&mut self, key: &[u8], sub: &[u8], value: V) -> Result<(), Error> {
        let entry: K = snapshot::decode_body(sub).map_err(|e| {
            e.context(format!(
                "the entry key under key b\"{}\"",
                key.escape_ascii()
            ))
        })?;
        let map = self.keys.entry_ref(key).or_default();
        if map.contains_key(&entry) {
            return Err(Error::new(format!(
                "an entry under key b\"{}\" was restored twice; a checkpoint holds each once",
                key.escape_ascii()
            )));
        }
        map.insert(
            entry,
            Slot {
                value: Some(value),
                changed: false,
            },
        );
        self.live += 1;
        Ok(())
    }
}
