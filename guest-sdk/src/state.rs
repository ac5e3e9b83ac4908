//! Keyed, incremental state: what an [`Operator::State`](crate::Operator::State) is.
//!
//! A checkpoint stores each key's state as one entry and only the keys changed since
//! the previous checkpoint are handed over, so a checkpoint costs the change, not the
//! state held. The state key is the record's routing key (the empty key for a record
//! without one): the host keeps an entry in the key's key group, so it follows its key
//! when the job runs with another parallelism. The window helpers and [`Keyed`] track
//! the keys they change; an operator author writes no state code.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::packed::StateChunk;
use crate::snapshot;

/// Whether a snapshot round has handed over every change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every key changed since the previous round is handed over.
    All,
    /// `changes` filled up; the next call continues the same round.
    More,
}

/// State kept per key and checkpointed incrementally.
pub trait KeyedState: Sized + 'static {
    /// One key's whole state as a checkpoint stores it.
    type Entry: Serialize + DeserializeOwned;

    /// Hands over the keys changed since the previous round, each once: its entry as
    /// it is now, or its removal. Stops at the first entry [`Changes`] refuses (the
    /// chunk is full) and returns [`Drained::More`]; the next call, with no other call
    /// in between, continues the same round from that entry. After [`Drained::All`] no key counts as changed. Each call's work
    /// follows the bytes it hands over, so a round of millions of keys never holds
    /// one call past its deadline.
    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error>;

    /// Adds the checkpointed `entry` of `key`, which this state does not hold yet.
    /// Restored entries are not changes.
    fn restore_entry(&mut self, key: &[u8], entry: Self::Entry) -> Result<(), Error>;

    /// Ends a restore: the instance had reached event time `watermark` when the
    /// checkpoint was taken, so every window ending at or before it has fired.
    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        let _ = watermark;
        Ok(())
    }
}

/// One chunk of a snapshot round's changes, encoded as versioned entries as they come.
#[derive(Debug, Default)]
pub struct Changes {
    version: u16,
    max_bytes: usize,
    chunk: StateChunk,
    scratch: Vec<u8>,
}

impl Changes {
    pub(crate) fn new(version: u16, max_bytes: usize) -> Self {
        Self {
            version,
            max_bytes,
            ..Self::default()
        }
    }

    /// `key`'s state is now `entry`, which must serialize exactly as the state's
    /// [`KeyedState::Entry`] does (a borrowed form of it, say). `false`: it does not
    /// fit in this chunk (the chunk's first entry always does); hand it over next call.
    pub fn put<E: Serialize + ?Sized>(&mut self, key: &[u8], entry: &E) -> Result<bool, Error> {
        self.scratch.clear();
        snapshot::encode_into(entry, self.version, &mut self.scratch)?;
        if !self.fits(key.len() + self.scratch.len()) {
            return Ok(false);
        }
        self.chunk.push(key, Some(&self.scratch));
        Ok(true)
    }

    /// `key` holds no state any more. `false`: it does not fit in this chunk.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        if !self.fits(key.len()) {
            return false;
        }
        self.chunk.push(key, None);
        true
    }

    fn fits(&self, bytes: usize) -> bool {
        self.chunk.is_empty() || self.chunk.data.len() + bytes <= self.max_bytes
    }

    pub(crate) fn into_chunk(self) -> StateChunk {
        self.chunk
    }
}

/// The keys of one snapshot round, each once, and how far the round got.
#[derive(Debug, Default)]
pub(crate) struct Round {
    keys: Vec<Box<[u8]>>,
    next: usize,
}

impl Round {
    /// A round over `keys`, duplicates dropped (hashed, not sorted: linear in the keys).
    pub(crate) fn new(keys: Vec<Box<[u8]>>) -> Self {
        let mut seen: hashbrown::HashSet<Box<[u8]>, foldhash::fast::FixedState> =
            hashbrown::HashSet::with_capacity_and_hasher(keys.len(), Default::default());
        let mut unique = Vec::with_capacity(keys.len());
        for key in keys {
            if !seen.contains(&key) {
                seen.insert(key.clone());
                unique.push(key);
            }
        }
        Self {
            keys: unique,
            next: 0,
        }
    }

    /// Hands the round's keys, from where it stopped, to `hand_over`, which returns
    /// false for a key that did not fit in this chunk: the round stops there
    /// ([`Drained::More`]) and the next call starts with that key.
    pub(crate) fn hand_over(
        &mut self,
        mut hand_over: impl FnMut(&[u8]) -> Result<bool, Error>,
    ) -> Result<Drained, Error> {
        while let Some(key) = self.keys.get(self.next) {
            if !hand_over(key)? {
                return Ok(Drained::More);
            }
            self.next += 1;
        }
        Ok(Drained::All)
    }
}

/// A stateless operator's state.
impl KeyedState for () {
    type Entry = ();

    fn drain_changes(&mut self, _: &mut Changes) -> Result<Drained, Error> {
        Ok(Drained::All)
    }

    fn restore_entry(&mut self, key: &[u8], _: ()) -> Result<(), Error> {
        Err(Error::new(format!(
            "a stateless operator was given state for key b\"{}\"; restore only state \
             written by this plugin",
            key.escape_ascii()
        )))
    }
}

type KeyMap<V> = hashbrown::HashMap<Box<[u8]>, V, foldhash::fast::FixedState>;

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

/// The error for a key restored twice.
pub(crate) fn duplicate(key: &[u8]) -> Error {
    Error::new(format!(
        "key b\"{}\" was restored twice; a checkpoint holds one entry per key",
        key.escape_ascii()
    ))
}

/// The materialized state a sequence of snapshot rounds describes: each key's latest
/// entry. What the host keeps for a checkpoint; tests use it to restore an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateImage {
    /// Each key's encoded entry.
    pub entries: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
}

impl StateImage {
    /// Applies one round's changes.
    pub fn apply(&mut self, chunk: &StateChunk) -> Result<(), Error> {
        for entry in chunk.iter() {
            match entry? {
                (key, Some(value)) => {
                    self.entries.insert(key.to_vec(), value.to_vec());
                }
                (key, None) => {
                    self.entries.remove(key);
                }
            }
        }
        Ok(())
    }

    /// The entries in chunks of at most `max_bytes` of data (an entry bigger than that
    /// comes alone), as a host restores them.
    pub fn chunks(&self, max_bytes: usize) -> Vec<StateChunk> {
        let mut chunks = Vec::new();
        let mut chunk = StateChunk::default();
        for (key, value) in &self.entries {
            if !chunk.is_empty() && chunk.data.len() + key.len() + value.len() > max_bytes {
                chunks.push(std::mem::take(&mut chunk));
            }
            chunk.push(key, Some(value));
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        chunks
    }
}
