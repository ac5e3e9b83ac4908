//! [`Keyed`]: one value per key, the state of an operator that keeps something per key
//! outside windows. A key's whole value is its one entry.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Changes, Drained, KeyedState, Round, duplicate};
use crate::error::Error;

type KeyMap<V> = super::KeyMap<V>;

/// A value of type `S` per key, tracking the keys it changes: the state of an operator
/// that keeps something per key outside windows (a running total, the last value seen).
///
/// Reading through [`get`](Keyed::get) changes nothing; every other access to a key
/// counts as a change, whether or not the value differs afterwards.
///
/// ```
/// use weir_guest::state::Keyed;
///
/// let mut totals = Keyed::<u64>::default();
/// *totals.entry(b"a") += 2;
/// *totals.entry(b"a") += 3;
/// assert_eq!(totals.get(b"a"), Some(&5));
/// assert_eq!(totals.remove(b"a"), Some(5));
/// assert!(totals.is_empty());
/// ```
#[derive(Debug)]
pub struct Keyed<S> {
    values: KeyMap<Value<S>>,
    /// Keys changed since the last snapshot round; removed ones included, so a key
    /// may appear twice.
    changed: Vec<Box<[u8]>>,
    /// The round being handed over.
    round: Option<Round>,
}

#[derive(Debug)]
struct Value<S> {
    value: S,
    changed: bool,
}

impl<S> Default for Keyed<S> {
    fn default() -> Self {
        Self {
            values: KeyMap::default(),
            changed: Vec::new(),
            round: None,
        }
    }
}

impl<S> Keyed<S> {
    /// `key`'s value, if it has one.
    pub fn get(&self, key: &[u8]) -> Option<&S> {
        self.values.get(key).map(|v| &v.value)
    }

    /// `key`'s value for changing, if it has one.
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut S> {
        let value = self.values.get_mut(key)?;
        if !value.changed {
            value.changed = true;
            self.changed.push(key.into());
        }
        Some(&mut value.value)
    }

    /// `key`'s value for changing, `S::default()` if it had none.
    pub fn entry(&mut self, key: &[u8]) -> &mut S
    where
        S: Default,
    {
        if !self.values.contains_key(key) {
            self.insert(key, S::default());
        }
        self.get_mut(key).expect("the key was just inserted")
    }

    /// Sets `key`'s value and returns the one it replaces.
    pub fn insert(&mut self, key: &[u8], value: S) -> Option<S> {
        let old = self.values.insert(
            key.into(),
            Value {
                value,
                changed: true,
            },
        );
        if !old.as_ref().is_some_and(|old| old.changed) {
            self.changed.push(key.into());
        }
        old.map(|old| old.value)
    }

    /// Removes `key`'s value and returns it.
    pub fn remove(&mut self, key: &[u8]) -> Option<S> {
        let old = self.values.remove(key)?;
        if !old.changed {
            self.changed.push(key.into());
        }
        Some(old.value)
    }

    /// The number of keys with a value.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// True when no key has a value.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Every key with its value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &S)> {
        self.values.iter().map(|(key, v)| (&key[..], &v.value))
    }
}

impl<S: Serialize + DeserializeOwned + 'static> KeyedState for Keyed<S> {
    type Entry = S;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        let mut round = match self.round.take() {
            Some(round) => round,
            None => Round::new(std::mem::take(&mut self.changed)),
        };
        let drained = round.hand_over(|key| match self.values.get_mut(key) {
            Some(value) => {
                let taken = changes.put(key, &value.value)?;
                value.changed &= !taken;
                Ok(taken)
            }
            None => Ok(changes.remove(key)),
        })?;
        if drained == Drained::More {
            self.round = Some(round);
        }
        Ok(drained)
    }

    fn restore_entry(&mut self, key: &[u8], entry: S) -> Result<(), Error> {
        let value = Value {
            value: entry,
            changed: false,
        };
        if self.values.insert(key.into(), value).is_some() {
            return Err(duplicate(key));
        }
        Ok(())
    }
}
