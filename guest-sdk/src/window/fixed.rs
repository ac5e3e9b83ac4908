//! The store behind tumbling and sliding windows: same-size windows ordered by start
//! (hence by end: a watermark completes a prefix), each with one accumulator per key.
//! On this per-record path a lookup allocates nothing and tries the newest window first.
//!
//! Changes are tracked per slot: the first touch of a (window, key) since the last
//! snapshot round notes it in its window (the slot remembers the round it was noted
//! for, so starting a round clears every note at once); firing a window notes its keys.
//! A round visits only what was noted, so its cost follows the change, and copies the
//! keys it hands over into one buffer, not one allocation each. When a single window is
//! open and none fired since the last round, a round looks no key up: with a good share
//! of its keys changed it walks the tables in memory order, taking the slots noted for
//! it; with fewer it reads each noted slot at the bucket the note holds (a lookup is a
//! cache miss or two, dependent on each other; a bucket read is one). A note whose
//! shard grew since points elsewhere; the slot's key tells, and only such a note is
//! looked up by its key. (The round that ends the numbering of rounds looks every key
//! up, as it clears every slot's note.)
//! A key of up to 16 bytes lives in its slot, so finding it reads the table alone; a
//! longer one lies in the window's key bytes, a second cache line per lookup.
//!
//! A window's table is split by hash into shards that grow one at a time: one table of
//! millions of keys doubled in one call for seconds, and the checkpoint behind it waited.

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

use super::{NO_WATERMARK, Window};
use crate::key;
use crate::error::Error;
use crate::state::{Changes, Drained, Round, Span, duplicate, span};

#[derive(Debug)]
pub(super) struct FixedWindows<A> {
    size: i64,
    /// Open windows by ascending start.
    windows: VecDeque<Pane<A>>,
    /// The highest watermark fired: windows ending at or before it are gone.
    watermark: i64,
    /// Records dropped because all their windows had already fired (not checkpointed).
    late: u64,
    /// Keys of windows fired since the last snapshot round (their state changed), back
    /// to back in `noted`; a round adds the keys its windows noted.
    fired: Vec<Span>,
    noted: Vec<u8>,
    /// The windows those keys were fired from.
    fired_windows: usize,
    /// The round changes are noted for now; starting a snapshot round moves it on.
    epoch: Epoch,
    /// The snapshot round being handed over.
    round: Option<Handover>,
    /// Whether a round has walked the only window / read its noted slots yet: the
    /// first of each is logged at debug level (the crash tests look for both).
    walked: bool,
    read_slots: bool,
}

/// How a snapshot round goes over its keys.
#[derive(Debug)]
enum Handover {
    /// The keys in `noted`, each looked up in every window.
    Keys(Round<Span>),
    /// The only window's slots in its tables' order, those noted for round `epoch`;
    /// `next` is the first of shard `shard` not handed over yet (nothing changes the
    /// tables meanwhile).
    Walk { epoch: Epoch, shard: usize, next: usize },
    /// The only window's noted slots, read where the notes say; `next` is the first note
    /// not handed over yet.
    Slots { noted: Vec<Noted>, next: usize },
}

/// A snapshot round's number, as slots note it; 0 is no round. Past the last, a round
/// clears every slot's note and numbering starts again at 1.
type Epoch = u32;

/// A single window's round walks its table once at least this share of its slots
/// (1 in `WALK_SHARE`) changed.
const WALK_SHARE: usize = 8;

/// One key's open windows as a checkpoint stores them: the window size (so a restore
/// with another size is refused) and each window's start with its accumulator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowsEntry<A> {
    /// The window size the entry was written with, in milliseconds.
    pub size_ms: i64,
    /// `(start, accumulator)` of each open window, by ascending start.
    pub windows: Vec<(i64, A)>,
}

/// [`WindowsEntry`] borrowed: serializes to the same bytes.
#[derive(Serialize)]
struct EntryRef<'a, A> {
    size_ms: i64,
    windows: &'a [(i64, &'a A)],
}

/// One window: a slot per key, and its keys longer than a slot holds back to back in
/// `keys`.
#[derive(Debug)]
struct Pane<A> {
    start: i64,
    keys: Vec<u8>,
    /// `SHARDS` tables, a key in the one its hash picks.
    shards: Box<[HashTable<Slot<A>>]>,
    /// The slots changed since the last snapshot round.
    changed: Vec<Noted>,
}

/// A changed slot: its key, and the bucket it lay in when noted. Its shard may have
/// grown since and moved it; a bucket holding another key (or none) says so.
#[derive(Clone, Copy, Debug)]
struct Noted {
    key: SlotKey,
    shard: u32,
    bucket: u32,
}

impl Noted {
    fn new(key: SlotKey, shard: usize, bucket: usize) -> Self {
        // A bucket past `u32` (never on wasm32) is looked up by key instead.
        let bucket = u32::try_from(bucket).unwrap_or(u32::MAX);
        Self { key, shard: shard as u32, bucket }
    }
}

/// 32 bytes with a `u64` accumulator: two slots a cache line. Growing the table hashes
/// the keys again, a few nanoseconds each, rather than keeping each hash.
#[derive(Debug)]
struct Slot<A> {
    key: SlotKey,
    /// The round this slot's change was noted for: changed since the last snapshot
    /// round if that is the current one (restored slots: 0, no round).
    noted: Epoch,
    accumulator: A,
}

/// The tables of a window. Keys spread evenly over them, so each grows early at its own
/// share of its capacity (see [`grow_early`]) and the shards double one after another.
const SHARDS: usize = 16;

/// A shard of a smaller capacity grows when full, as hashbrown grows it: moving it takes
/// microseconds.
const EARLY_FROM: usize = 4096;

/// The shard of a key's hash: bits hashbrown does not read for the bucket or the tag
/// compared before a key (on wasm32 it reads the low 32 bits only; on 64-bit targets the
/// low bucket bits and the highest seven).
fn shard_of(hash: u64) -> usize {
    (hash >> 40) as usize % SHARDS
}

/// Doubles shard `index` of a window once it is (16 + index)/32 full, ahead of
/// hashbrown's own growth when full (7/8 of its buckets used): as the shards fill
/// evenly, they grow one at a time, each about 3 % of a capacity's worth of keys after
/// the one before.
fn grow_early<A>(shard: &mut HashTable<Slot<A>>, index: usize, keys: &[u8]) {
    let (len, capacity) = (shard.len(), shard.capacity());
    if capacity >= EARLY_FROM && len * 32 >= capacity * (16 + index) {
        // Room for twice the capacity in all: the next power of two of buckets.
        shard.reserve(2 * capacity - len, |slot| slot.key.hash(keys));
    }
}

/// The probe's key's entry in its shard of a window (`keys` are the window's), the
/// shard grown first if due.
fn entry<'s, A>(shards: &'s mut [HashTable<Slot<A>>], keys: &[u8], probe: &Probe) -> Entry<'s, Slot<A>> {
    let index = shard_of(probe.hash);
    let shard = &mut shards[index];
    grow_early(shard, index, keys);
    shard.entry(probe.hash, |slot| slot.key.is(probe, keys), |slot| slot.key.hash(keys))
}

/// The longest key a slot holds itself.
const INLINE: usize = 16;

/// A slot's key: its bytes if they fit, else where they lie in the window's `keys` (the
/// offset in the first four bytes).
#[derive(Clone, Copy, Debug)]
struct SlotKey {
    len: u32,
    bytes: [u8; INLINE],
}

impl SlotKey {
    /// The probe's key as a slot holds it; a long one is appended to `keys`.
    fn new(probe: &Probe, keys: &mut Vec<u8>) -> Self {
        let len = u32::try_from(probe.key.len()).expect("a key stays below 4 GiB");
        let bytes = probe.padded.unwrap_or_else(|| {
            let (offset, _) = push_key(keys, probe.key);
            let mut bytes = [0u8; INLINE];
            bytes[..4].copy_from_slice(&offset.to_le_bytes());
            bytes
        });
        Self { len, bytes }
    }

    /// Whether this is the very key of `other`, a slot key of the same window: a short
    /// key's bytes, a long key's place in the window's keys, which no other slot shares.
    fn same(&self, other: &SlotKey) -> bool {
        self.len == other.len && self.bytes == other.bytes
    }

    /// The key's hash, as [`Probe`] holds it.
    fn hash(&self, keys: &[u8]) -> u64 {
        key::hash(self.get(keys))
    }

    /// Whether this is the probe's key; `keys` are the window's.
    #[inline]
    fn is(&self, probe: &Probe, keys: &[u8]) -> bool {
        match probe.padded {
            Some(padded) => {
                self.len as usize == probe.key.len()
                    && u128::from_ne_bytes(self.bytes) == u128::from_ne_bytes(padded)
            }
            None => key::equal(self.get(keys), probe.key),
        }
    }

    /// The key's bytes; `keys` are its window's.
    #[inline]
    fn get<'a>(&'a self, keys: &'a [u8]) -> &'a [u8] {
        match self.bytes.get(..self.len as usize) {
            Some(inline) => inline,
            None => {
                let offset = u32::from_le_bytes(self.bytes[..4].try_into().expect("four bytes"));
                span(keys, (offset, self.len))
            }
        }
    }
}

/// A key looked up in the windows: its hash, and its bytes as a slot holds them if
/// they fit, so that a slot is compared a word at a time.
struct Probe<'a> {
    key: &'a [u8],
    hash: u64,
    padded: Option<[u8; INLINE]>,
}

impl<'a> Probe<'a> {
    #[inline]
    fn new(key: &'a [u8]) -> Self {
        Self {
            key,
            hash: key::hash(key),
            padded: crate::bytes::padded(key),
        }
    }
}

impl<A> Pane<A> {
    fn new(start: i64) -> Self {
        Self {
            start,
            keys: Vec::new(),
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            changed: Vec::new(),
        }
    }

    fn find(&self, probe: &Probe) -> Option<&Slot<A>> {
        let keys = &self.keys;
        self.shards[shard_of(probe.hash)].find(probe.hash, |slot| slot.key.is(probe, keys))
    }

    /// The accumulator of the probe's key, made by `make` if the key is new to the
    /// window; the slot counts as changed in round `epoch`.
    fn accumulator(&mut self, probe: &Probe, epoch: Epoch, make: impl FnOnce() -> A) -> &mut A {
        let Pane {
            keys,
            shards,
            changed,
            ..
        } = self;
        let shard = shard_of(probe.hash);
        match entry(shards, keys, probe) {
            Entry::Occupied(occupied) => {
                let bucket = occupied.bucket_index();
                let slot = occupied.into_mut();
                if slot.noted != epoch {
                    slot.noted = epoch;
                    changed.push(Noted::new(slot.key, shard, bucket));
                }
                &mut slot.accumulator
            }
            Entry::Vacant(vacant) => {
                let key = SlotKey::new(probe, keys);
                let slot = Slot {
                    key,
                    noted: epoch,
                    accumulator: make(),
                };
                let occupied = vacant.insert(slot);
                changed.push(Noted::new(key, shard, occupied.bucket_index()));
                &mut occupied.into_mut().accumulator
            }
        }
    }

    /// The slot `noted` stands for: in its bucket, unless its shard has grown since.
    fn noted_slot(&self, noted: &Noted) -> Option<&Slot<A>> {
        let shard = &self.shards[noted.shard as usize];
        match shard.get_bucket(noted.bucket as usize) {
            Some(slot) if slot.key.same(&noted.key) => Some(slot),
            _ => self.find(&Probe::new(noted.key.get(&self.keys))),
        }
    }

    /// Adds a restored accumulator of a key new to the window, unchanged.
    fn restore(&mut self, probe: &Probe, accumulator: A) -> Result<(), Error> {
        let Pane { keys, shards, .. } = self;
        match entry(shards, keys, probe) {
            Entry::Occupied(_) => Err(duplicate(probe.key)),
            Entry::Vacant(vacant) => {
                let slot = Slot {
                    key: SlotKey::new(probe, keys),
                    noted: 0,
                    accumulator,
                };
                vacant.insert(slot);
                Ok(())
            }
        }
    }

    /// Its (key, accumulator) pairs.
    fn len(&self) -> usize {
        self.shards.iter().map(HashTable::len).sum()
    }

    /// Copies the keys noted since the last snapshot round to the end of `bytes`, their
    /// spans to `spans`; the notes are dropped (the round moving on clears the slots').
    fn take_changed(&mut self, bytes: &mut Vec<u8>, spans: &mut Vec<Span>) {
        for noted in self.changed.drain(..) {
            spans.push(push_key(bytes, noted.key.get(&self.keys)));
        }
    }

    /// Every (key, accumulator) ordered by key bytes. Sorted by each key's first sixteen
    /// bytes, held beside its slot, and only keys alike that far compared whole: most
    /// comparisons touch no key.
    fn into_sorted(self) -> (Vec<u8>, impl Iterator<Item = Slot<A>>) {
        let keys = self.keys;
        let mut slots: Vec<(u128, Slot<A>)> = self
            .shards
            .into_iter()
            .flatten()
            .map(|slot| (key::prefix(slot.key.get(&keys)), slot))
            .collect();
        slots.sort_unstable_by(|(a_prefix, a), (b_prefix, b)| {
            a_prefix.cmp(b_prefix).then_with(|| {
                key::compare(a.key.get(&keys), b.key.get(&keys))
            })
        });
        (keys, slots.into_iter().map(|(_, slot)| slot))
    }
}

impl<A> FixedWindows<A> {
    pub(super) fn new(size: i64) -> Self {
        debug_assert!(size > 0);
        Self {
            size,
            windows: VecDeque::new(),
            watermark: NO_WATERMARK,
            late: 0,
            fired: Vec::new(),
            noted: Vec::new(),
            fired_windows: 0,
            epoch: 1,
            round: None,
            walked: false,
            read_slots: false,
        }
    }

    pub(super) fn size(&self) -> i64 {
        self.size
    }

    pub(super) fn window(&self, start: i64) -> Window {
        Window {
            start,
            end: start.saturating_add(self.size),
        }
    }

    /// True if the window starting at `start` has fired: a record for it is late.
    pub(super) fn has_fired(&self, start: i64) -> bool {
        self.window(start).end <= self.watermark
    }

    /// The accumulator of `key` in the window starting at `start`, which must not
    /// have fired.
    pub(super) fn accumulator(&mut self, start: i64, key: &[u8]) -> &mut A
    where
        A: Default,
    {
        debug_assert!(!self.has_fired(start));
        let index = self.pane_index(start);
        self.windows[index].accumulator(&Probe::new(key), self.epoch, A::default)
    }

    /// The index of the window starting at `start`, opened if new. Searched from the
    /// newest: in-order records find it at once, late ones a few steps further.
    fn pane_index(&mut self, start: i64) -> usize {
        let mut index = self.windows.len();
        while index > 0 {
            let candidate = self.windows[index - 1].start;
            if candidate == start {
                return index - 1;
            }
            if candidate < start {
                break;
            }
            index -= 1;
        }
        self.windows.insert(index, Pane::new(start));
        index
    }

    pub(super) fn count_late(&mut self) {
        self.late += 1;
    }

    pub(super) fn late(&self) -> u64 {
        self.late
    }

    pub(super) fn watermark(&self) -> i64 {
        self.watermark
    }

    /// (window, key) pairs still open.
    pub(super) fn open(&self) -> usize {
        self.windows.iter().map(Pane::len).sum()
    }

    /// Removes every window with `end <= watermark` and hands over its accumulators
    /// by window end, then key bytes.
    pub(super) fn fire(&mut self, watermark: i64, mut emit: impl FnMut(Window, &[u8], A)) {
        self.watermark = self.watermark.max(watermark);
        while let Some(first) = self.windows.front() {
            let window = self.window(first.start);
            if window.end > watermark {
                break;
            }
            let pane = self.windows.pop_front().expect("the front window exists");
            self.fired_windows += 1;
            let (keys, slots) = pane.into_sorted();
            for slot in slots {
                let key = slot.key.get(&keys);
                self.fired.push(push_key(&mut self.noted, key));
                emit(window, key, slot.accumulator);
            }
        }
    }
}

impl<A: Serialize> FixedWindows<A> {
    /// Hands over each key whose windows changed since the last round: all its open
    /// windows, or its removal once none is left; up to a full `changes` per call.
    pub(super) fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        let round = match self.round.take() {
            Some(round) => round,
            None => self.begin_round(),
        };
        let (drained, round) = match round {
            Handover::Keys(mut round) => (self.hand_over_keys(&mut round, changes)?, Handover::Keys(round)),
            Handover::Walk { epoch, mut shard, mut next } => {
                let drained = self.walk(epoch, (&mut shard, &mut next), changes)?;
                (drained, Handover::Walk { epoch, shard, next })
            }
            Handover::Slots { noted, mut next } => {
                let drained = self.hand_over_slots(&noted, &mut next, changes)?;
                (drained, Handover::Slots { noted, next })
            }
        };
        match drained {
            Drained::More => self.round = Some(round),
            Drained::All => self.round_over(round),
        }
        Ok(drained)
    }

    /// Drops what a round held; a round of noted slots hands their list back, cleared,
    /// so the next round's notes need not grow it anew.
    fn round_over(&mut self, round: Handover) {
        self.noted.clear();
        if let (Handover::Slots { mut noted, .. }, Some(only)) = (round, self.windows.front_mut())
            && only.changed.is_empty()
        {
            noted.clear();
            only.changed = noted;
        }
    }

    /// Hands over the keys of `round`: each key's open windows, or its removal.
    fn hand_over_keys(&self, round: &mut Round<Span>, changes: &mut Changes) -> Result<Drained, Error> {
        let mut windows: Vec<(i64, &A)> = Vec::new();
        round.hand_over(|&noted| {
            let key = span(&self.noted, noted);
            let probe = Probe::new(key);
            windows.clear();
            windows.extend(
                self.windows
                    .iter()
                    .filter_map(|pane| Some((pane.start, &pane.find(&probe)?.accumulator))),
            );
            if windows.is_empty() {
                return Ok(changes.remove(key));
            }
            let entry = EntryRef {
                size_ms: self.size,
                windows: &windows,
            };
            changes.put(key, &entry)
        })
    }

    /// Hands over the only window's slots noted for round `epoch`, from the `next`th of
    /// shard `shard` on; the two end at the first slot not handed over.
    fn walk(&self, epoch: Epoch, (shard, next): (&mut usize, &mut usize), changes: &mut Changes) -> Result<Drained, Error> {
        let pane = &self.windows[0];
        while let Some(table) = pane.shards.get(*shard) {
            for slot in table.iter().skip(*next) {
                if slot.noted == epoch && !self.put_only(pane, slot, changes)? {
                    return Ok(Drained::More);
                }
                *next += 1;
            }
            (*shard, *next) = (*shard + 1, 0);
        }
        Ok(Drained::All)
    }

    /// Hands over the only window's slots in `noted`, from the `next`th on; `next` ends
    /// at the first not handed over.
    fn hand_over_slots(&self, noted: &[Noted], next: &mut usize, changes: &mut Changes) -> Result<Drained, Error> {
        let pane = &self.windows[0];
        for note in &noted[*next..] {
            let slot = pane
                .noted_slot(note)
                .expect("a noted key stays in its window until the window fires, after the round");
            if !self.put_only(pane, slot, changes)? {
                return Ok(Drained::More);
            }
            *next += 1;
        }
        Ok(Drained::All)
    }

    /// Puts the entry of a slot of `pane`, the only window open: that window alone.
    fn put_only(&self, pane: &Pane<A>, slot: &Slot<A>, changes: &mut Changes) -> Result<bool, Error> {
        let windows = [(pane.start, &slot.accumulator)];
        let entry = EntryRef {
            size_ms: self.size,
            windows: &windows,
        };
        changes.put(slot.key.get(&pane.keys), &entry)
    }

    /// A round over the keys fired or noted since the last, each once; changes from now
    /// on are noted for the next.
    fn begin_round(&mut self) -> Handover {
        let epoch = self.epoch;
        let last = epoch == Epoch::MAX;
        self.epoch = if last { 1 } else { epoch + 1 };
        if let [only] = self.windows.make_contiguous()
            && !last
            && self.fired_windows == 0
            && !only.changed.is_empty()
        {
            let (changed, len) = (only.changed.len(), only.len());
            if changed * WALK_SHARE >= len {
                only.changed.clear();
                if !std::mem::replace(&mut self.walked, true) {
                    crate::debug!("a snapshot round walks the only window's {len} slots for {changed} changed");
                }
                return Handover::Walk { epoch, shard: 0, next: 0 };
            }
            if !std::mem::replace(&mut self.read_slots, true) {
                crate::debug!("a snapshot round reads {changed} noted slots of the only window's {len}");
            }
            let noted = std::mem::take(&mut only.changed);
            return Handover::Slots { noted, next: 0 };
        }
        // The keys fired from or noted in one window are distinct; those of several
        // windows may repeat one.
        let changed_windows = self.windows.iter().filter(|pane| !pane.changed.is_empty()).count();
        let distinct = std::mem::take(&mut self.fired_windows) + changed_windows <= 1;
        let mut spans = std::mem::take(&mut self.fired);
        for pane in &mut self.windows {
            pane.take_changed(&mut self.noted, &mut spans);
            if last {
                pane.shards.iter_mut().flatten().for_each(|slot| slot.noted = 0);
            }
        }
        Handover::Keys(match distinct {
            true => Round::distinct(spans),
            false => Round::of_spans(&self.noted, spans),
        })
    }
}

/// Appends `key` to `bytes`; returns where it lies.
fn push_key(bytes: &mut Vec<u8>, key: &[u8]) -> Span {
    let offset = u32::try_from(bytes.len()).expect("keys held back to back stay below 4 GiB");
    crate::bytes::append(bytes, key);
    (offset, key.len() as u32)
}

impl<A> FixedWindows<A> {
    /// Adds a key's restored windows; an entry of another window size is refused.
    pub(super) fn restore_entry(&mut self, key: &[u8], entry: WindowsEntry<A>) -> Result<(), Error> {
        if entry.size_ms != self.size {
            return Err(Error::new(format!(
                "the checkpoint holds {} ms windows but these windows are {} ms; restore with \
                 the window size the job ran with, or start the job afresh",
                entry.size_ms, self.size
            )));
        }
        let probe = Probe::new(key);
        for (start, accumulator) in entry.windows {
            let index = self.pane_index(start);
            self.windows[index].restore(&probe, accumulator)?;
        }
        Ok(())
    }

    /// Ends a restore: windows ending at or before `watermark` fired before the
    /// checkpoint, so a record for one of them is late.
    pub(super) fn restored(&mut self, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One whole snapshot round, in chunks of 4 KiB: each key with its value (none for a
    /// removal), sorted.
    fn round_entries(windows: &mut FixedWindows<u64>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut entries = Vec::new();
        loop {
            let mut changes = Changes::new(1, 1 << 12);
            let drained = windows.drain_changes(&mut changes).unwrap();
            let chunk = changes.into_chunk();
            entries.extend(chunk.iter().map(Result::unwrap).map(|(key, value)| (key.to_vec(), value.map(<[u8]>::to_vec))));
            if drained == Drained::All {
                break;
            }
        }
        entries.sort();
        entries
    }

    /// The keys of one whole snapshot round, sorted.
    fn round(windows: &mut FixedWindows<u64>) -> Vec<Vec<u8>> {
        round_entries(windows).into_iter().map(|(key, _)| key).collect()
    }

    /// Each key of one whole snapshot round with its count in the one open window.
    fn round_counts(windows: &mut FixedWindows<u64>) -> Vec<(Vec<u8>, u64)> {
        let count = |value: Option<Vec<u8>>| {
            let value = value.expect("not a removal");
            let entry: WindowsEntry<u64> = crate::snapshot::decode_body(crate::snapshot::parse(&value).unwrap().body).unwrap();
            entry.windows[0].1
        };
        round_entries(windows).into_iter().map(|(key, value)| (key, count(value))).collect()
    }

    /// The capacity of each shard of the first window.
    fn capacities(windows: &FixedWindows<u64>) -> Vec<usize> {
        windows.windows[0].shards.iter().map(HashTable::capacity).collect()
    }

    #[test]
    fn a_slot_of_a_short_key_and_a_count_is_half_a_cache_line() {
        assert_eq!(size_of::<Slot<u64>>(), 32);
    }

    #[test]
    fn a_window_grows_its_shards_one_after_another() {
        let mut windows = FixedWindows::<u64>::new(100);
        *windows.accumulator(0, b"first") += 1;
        // Where each shard of the capacity EARLY_FROM or more grew: the keys then open.
        let (mut before, mut growths) = (capacities(&windows), Vec::new());
        for i in 0..300_000u32 {
            *windows.accumulator(0, &i.to_le_bytes()) += 1;
            let after = capacities(&windows);
            let grown = before.iter().zip(&after).position(|(b, a)| a != b);
            if let Some(shard) = grown.filter(|&shard| before[shard] >= EARLY_FROM) {
                // 7/8 of the buckets, twice as many.
                assert_eq!(after[shard], 2 * before[shard], "shard {shard} doubles");
                growths.push(windows.open());
            }
            before = after;
        }
        assert!(growths.len() >= 2 * SHARDS, "{} growths of large shards", growths.len());
        // Were they to grow when full, the shards would all grow within a few hundred
        // keys of each other.
        for (i, &at) in growths.iter().enumerate() {
            let close = growths[..i].iter().filter(|&&earlier| at - earlier < at / 50).count();
            assert!(close <= 1, "{} shards grew within {} keys before {at}: {growths:?}", close + 1, at / 50);
        }
        assert_eq!(windows.open(), 300_001);
    }

    #[test]
    fn a_round_reads_noted_slots_where_they_are_after_their_shard_grew() {
        let mut windows = FixedWindows::<u64>::new(100);
        let key = |i: u32| format!("key-{i:08}").into_bytes();
        let long = |i: u32| format!("a key longer than a slot holds {i}").into_bytes();
        for i in 0..300_000 {
            *windows.accumulator(0, &key(i)) += 1;
        }
        for i in 0..1_000 {
            *windows.accumulator(0, &long(i)) += 1;
        }
        round(&mut windows);
        // A few old keys change, then new keys come until a shard has grown, then more
        // old keys change: notes from before the growth point to buckets it emptied or
        // filled with other keys.
        let mut expected: Vec<(Vec<u8>, u64)> = Vec::new();
        for i in (0..2_000).step_by(2) {
            *windows.accumulator(0, &key(i)) += 1;
            expected.push((key(i), 2));
        }
        for i in 0..500 {
            *windows.accumulator(0, &long(i)) += 1;
            expected.push((long(i), 2));
        }
        let before = capacities(&windows);
        let mut new = 300_000;
        while capacities(&windows) == before {
            *windows.accumulator(0, &key(new)) += 1;
            expected.push((key(new), 1));
            new += 1;
        }
        for i in (1..2_000).step_by(2) {
            *windows.accumulator(0, &key(i)) += 1;
            expected.push((key(i), 2));
        }
        let pane = &windows.windows[0];
        assert!(pane.changed.len() * WALK_SHARE < pane.len(), "a round that reads the notes, not the table");
        let moved = pane.changed.iter().filter(|noted| {
            let slot = pane.shards[noted.shard as usize].get_bucket(noted.bucket as usize);
            !slot.is_some_and(|slot| slot.key.same(&noted.key))
        });
        assert!(moved.count() > 0, "some notes point where their slot no longer is");
        expected.sort();
        assert_eq!(round_counts(&mut windows), expected);
        assert!(windows.windows[0].changed.capacity() >= expected.len(), "the notes' list comes back");
        assert!(round(&mut windows).is_empty(), "nothing changed since");
    }

    #[test]
    fn rounds_hold_what_changed_as_their_numbers_start_again() {
        let mut windows = FixedWindows::<u64>::new(100);
        let keys: Vec<Vec<u8>> = (0..64u32).map(|i| format!("k{i}").into_bytes()).collect();
        // Every key noted in round 1, long ago; the next round 1 must note them afresh.
        for key in &keys {
            *windows.accumulator(0, key) += 1;
        }
        assert_eq!(round(&mut windows).len(), 64);
        windows.epoch = Epoch::MAX - 2;
        // Rounds that walk the window's table (an eighth of its keys or more changed) and
        // rounds that look each key up, across the end of the numbers and past it. The
        // last number's round would walk; the next round 1 changes keys untouched since
        // the first.
        let rounds = [(0, 3), (0, 2), (0, 10), (50, 5), (0, 64), (0, 2), (0, 64)];
        for (round_number, (first, changed)) in rounds.into_iter().enumerate() {
            let changed = &keys[first..first + changed];
            for key in changed {
                *windows.accumulator(0, key) += 1;
            }
            let mut expected = changed.to_vec();
            expected.sort();
            assert_eq!(round(&mut windows), expected, "round {round_number}");
        }
        assert_eq!(windows.epoch, 5, "numbered from 1 again");
        assert!(round(&mut windows).is_empty(), "nothing changed since");
    }
}
