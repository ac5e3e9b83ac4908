//! Keyed, incremental state: what an [`Operator::State`](crate::Operator::State) is.
//!
//! A checkpoint stores state as entries and only the entries changed since the previous
//! checkpoint are handed over, so a checkpoint costs the change, not the state held.
//! Every entry belongs to a record's routing key (the empty key for a record without
//! one): the host keeps it in the key's key group, so it follows its key when the job
//! runs with another parallelism. [`Keyed`] and the window helpers keep one entry per
//! key; [`KeyedMap`] and [`Timers`] one per map entry or timer, under a state key that
//! hashes as the routing key does; a tuple of states is a state. Each tracks what it
//! changes: an operator author writes no state code.

mod keyed;
mod map;
mod subkey;
mod timers;
mod tuple;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::packed::StateChunk;
use crate::snapshot;

pub use keyed::Keyed;
pub use map::KeyedMap;
pub use timers::Timers;
pub use tuple::{Part2, Part3};

/// Values per key, hashed with a fixed seed: the same state behaves the same in every
/// instance, and no entropy is asked of the host.
type KeyMap<V> = hashbrown::HashMap<Box<[u8]>, V, foldhash::fast::FixedState>;

/// Whether a snapshot round has handed over every change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every key changed since the previous round is handed over.
    All,
    /// `changes` filled up; the next call continues the same round.
    More,
}

/// State kept per key and checkpointed incrementally.
///
/// A state keeps either one entry per key ([`Changes::put`], restored through
/// [`restore_entry`](KeyedState::restore_entry)) or entries under a key
/// ([`Changes::put_under`], restored through
/// [`restore_under`](KeyedState::restore_under), with [`SUB_KEYS`](KeyedState::SUB_KEYS)
/// set), never both.
pub trait KeyedState: Sized + 'static {
    /// One entry as a checkpoint stores it: a key's whole state, or one entry under it.
    type Entry: Serialize + DeserializeOwned;

    /// True for a state that keeps its entries under keys ([`Changes::put_under`]):
    /// each is then restored through [`restore_under`](KeyedState::restore_under).
    const SUB_KEYS: bool = false;

    /// Hands over the keys changed since the previous round, each once: its entry as
    /// it is now, or its removal. Stops at the first entry [`Changes`] refuses (the
    /// chunk is full) and returns [`Drained::More`]; the next call, with no other call
    /// in between, continues the same round from that entry. After [`Drained::All`] no
    /// key counts as changed, and a round begun with nothing changed hands over
    /// nothing. Each call's work follows the bytes it hands over, so a round of
    /// millions of keys never holds one call past its deadline.
    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error>;

    /// Adds the checkpointed `entry` of `key`, which this state does not hold yet.
    /// Restored entries are not changes.
    fn restore_entry(&mut self, key: &[u8], entry: Self::Entry) -> Result<(), Error>;

    /// Adds the checkpointed `entry` that [`Changes::put_under`] stored under `key` and
    /// `sub`. By default, only an entry of the key itself (`sub` empty), through
    /// [`restore_entry`](KeyedState::restore_entry).
    fn restore_under(&mut self, key: &[u8], sub: &[u8], entry: Self::Entry) -> Result<(), Error> {
        if !sub.is_empty() {
            return Err(Error::new(format!(
                "the checkpoint holds an entry under key b\"{}\", but this state keeps one entry \
                 per key; restore only state written by this plugin",
                key.escape_ascii()
            )));
        }
        self.restore_entry(key, entry)
    }

    /// Ends a restore: the instance had reached event time `watermark` when the
    /// checkpoint was taken, so every window ending at or before it has fired.
    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        let _ = watermark;
        Ok(())
    }

    /// The timers this state holds, which the [`Runner`](crate::Runner) fires through
    /// [`Operator::on_timer`](crate::Operator::on_timer); none by default.
    fn timers(&mut self) -> Option<&mut Timers> {
        None
    }
}

/// Restores one checkpointed entry of state key `key` into `state`, under its routing
/// key if the state keeps entries under keys.
pub(crate) fn restore<S: KeyedState>(
    state: &mut S,
    key: &[u8],
    entry: S::Entry,
) -> Result<(), Error> {
    if S::SUB_KEYS {
        let (key, sub) = subkey::split(key)?;
        return state.restore_under(key, sub, entry);
    }
    state.restore_entry(key, entry)
}

/// One chunk of a snapshot round's changes, encoded as versioned entries as they come.
#[derive(Debug, Default)]
pub struct Changes {
    version: u16,
    max_bytes: usize,
    chunk: StateChunk,
    /// The entry being encoded.
    scratch: Vec<u8>,
    /// The state key being derived.
    key: Vec<u8>,
    /// The part indexes of the tuples being drained, outermost first: they lead every
    /// state key's path and every entry's body (as the variants of `Part2`/`Part3`).
    scope: Vec<u8>,
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
        self.put_at(key, None, entry)
    }

    /// `key` holds no state any more. `false`: it does not fit in this chunk.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.remove_at(key, None)
    }

    /// The entry under `key` and `sub` (e.g. a map's encoded entry key) is now `entry`:
    /// one state entry of its own, in `key`'s key group, restored through
    /// [`KeyedState::restore_under`]. `false`: it does not fit in this chunk.
    pub fn put_under<E: Serialize + ?Sized>(
        &mut self,
        key: &[u8],
        sub: &[u8],
        entry: &E,
    ) -> Result<bool, Error> {
        self.put_at(key, Some(sub), entry)
    }

    /// The entry under `key` and `sub` is gone. `false`: it does not fit in this chunk.
    pub fn remove_under(&mut self, key: &[u8], sub: &[u8]) -> bool {
        self.remove_at(key, Some(sub))
    }

    fn put_at<E: Serialize + ?Sized>(
        &mut self,
        key: &[u8],
        sub: Option<&[u8]>,
        entry: &E,
    ) -> Result<bool, Error> {
        self.scratch.clear();
        snapshot::encode_tagged_into(entry, self.version, &self.scope, &mut self.scratch)?;
        let derived = self.derive(key, sub);
        let state_key = if derived { &self.key[..] } else { key };
        if !fits(
            &self.chunk,
            self.max_bytes,
            state_key.len() + self.scratch.len(),
        ) {
            return Ok(false);
        }
        self.chunk.push(state_key, Some(&self.scratch));
        Ok(true)
    }

    fn remove_at(&mut self, key: &[u8], sub: Option<&[u8]>) -> bool {
        let derived = self.derive(key, sub);
        let state_key = if derived { &self.key[..] } else { key };
        if !fits(&self.chunk, self.max_bytes, state_key.len()) {
            return false;
        }
        self.chunk.push(state_key, None);
        true
    }

    /// Derives the state key of `key` and `sub` into `self.key` unless it is `key`
    /// itself (no tuple, no sub-key); returns whether it did.
    fn derive(&mut self, key: &[u8], sub: Option<&[u8]>) -> bool {
        if self.scope.is_empty() && sub.is_none() {
            return false;
        }
        subkey::derive(&mut self.key, key, &[&self.scope, sub.unwrap_or_default()]);
        true
    }

    /// Drains part `index` of a tuple next.
    pub(crate) fn enter(&mut self, index: u8) {
        self.scope.push(index);
    }

    pub(crate) fn leave(&mut self) {
        self.scope.pop();
    }

    pub(crate) fn into_chunk(self) -> StateChunk {
        self.chunk
    }
}

fn fits(chunk: &StateChunk, max_bytes: usize, bytes: usize) -> bool {
    chunk.is_empty() || chunk.data.len() + bytes <= max_bytes
}

/// The keys of one snapshot round, each once, and how far the round got.
#[derive(Debug)]
pub(crate) struct Round<T = Box<[u8]>> {
    keys: Vec<T>,
    next: usize,
}

impl Round {
    /// A round over `keys`, duplicates dropped (hashed, not sorted: linear in the keys).
    pub(crate) fn new(keys: Vec<Box<[u8]>>) -> Self {
        let first = first_of_each(keys.len(), |index| &keys[index]);
        let unique = keys.into_iter().zip(first).filter_map(|(key, first)| first.then_some(key)).collect();
        Round::distinct(unique)
    }
}

impl Round<Span> {
    /// A round over the keys `spans` cut out of `bytes`, duplicates dropped.
    pub(crate) fn of_spans(bytes: &[u8], spans: Vec<Span>) -> Self {
        let first = first_of_each(spans.len(), |index| span(bytes, spans[index]));
        let unique = spans.into_iter().zip(first).filter_map(|(span, first)| first.then_some(span)).collect();
        Round::distinct(unique)
    }
}

/// A key's place in a buffer of keys: its offset and length.
pub(crate) type Span = (u32, u32);

/// The key `span` of `bytes`.
#[inline]
pub(crate) fn span(bytes: &[u8], (offset, len): Span) -> &[u8] {
    &bytes[offset as usize..][..len as usize]
}

/// Whether each of `count` keys (`key(i)`) is the first of its bytes: one hash and,
/// on a match, one comparison per key, a word at a time (`crate::key`); no key copied.
fn first_of_each<'a>(count: usize, key: impl Fn(usize) -> &'a [u8]) -> Vec<bool> {
    let mut seen: hashbrown::HashTable<u32> = hashbrown::HashTable::with_capacity(count);
    (0..count)
        .map(|index| {
            let bytes = key(index);
            let hash = crate::key::hash(bytes);
            match seen.find(hash, |&other| crate::key::equal(key(other as usize), bytes)) {
                Some(_) => false,
                None => {
                    seen.insert_unique(hash, index as u32, |&other| crate::key::hash(key(other as usize)));
                    true
                }
            }
        })
        .collect()
}

impl<T> Round<T> {
    /// A round over `keys`, which are distinct already.
    pub(crate) fn distinct(keys: Vec<T>) -> Self {
        Self { keys, next: 0 }
    }

    /// Hands the round's keys, from where it stopped, to `hand_over`, which returns
    /// false for a key that did not fit in this chunk: the round stops there
    /// ([`Drained::More`]) and the next call starts with that key.
    pub(crate) fn hand_over(
        &mut self,
        mut hand_over: impl FnMut(&T) -> Result<bool, Error>,
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

#[cfg(test)]
mod tests;
