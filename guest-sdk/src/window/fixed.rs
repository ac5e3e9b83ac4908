//! The store behind tumbling and sliding windows: same-size windows ordered by start
//! (hence by end: a watermark completes a prefix), each with one accumulator per key.
//! On this per-record path a lookup allocates nothing and tries the newest window first.
//!
//! Changes are tracked per slot: the first touch of a (window, key) since the last
//! snapshot round sets its flag and notes it in its window; firing a window notes its
//! keys. A round visits only what was noted, so its cost follows the change.

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

use super::{NO_WATERMARK, Window, key};
use crate::error::Error;
use crate::state::{Changes, Drained, Round, duplicate};

#[derive(Debug)]
pub(super) struct FixedWindows<A> {
    size: i64,
    /// Open windows by ascending start.
    windows: VecDeque<Pane<A>>,
    /// The highest watermark fired: windows ending at or before it are gone.
    watermark: i64,
    /// Records dropped because all their windows had already fired (not checkpointed).
    late: u64,
    /// Keys of windows fired since the last snapshot round: their state changed.
    fired: Vec<Box<[u8]>>,
    /// The snapshot round being handed over.
    round: Option<Round>,
}

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

/// One window: its keys back to back in `keys`, and a slot per key.
#[derive(Debug)]
struct Pane<A> {
    start: i64,
    keys: Vec<u8>,
    slots: HashTable<Slot<A>>,
    /// `(offset, len)` of the keys whose slot changed since the last snapshot round.
    changed: Vec<(u32, u32)>,
}

#[derive(Debug)]
struct Slot<A> {
    /// Kept so that growing the table never rehashes keys.
    hash: u64,
    offset: u32,
    len: u32,
    /// Set on the first change since the last snapshot round.
    changed: bool,
    accumulator: A,
}

impl<A> Pane<A> {
    fn new(start: i64) -> Self {
        Self {
            start,
            keys: Vec::new(),
            slots: HashTable::new(),
            changed: Vec::new(),
        }
    }

    fn find(&self, hash: u64, key: &[u8]) -> Option<&Slot<A>> {
        let keys = &self.keys;
        self.slots.find(hash, |slot| {
            key::equal(&keys[slot.offset as usize..][..slot.len as usize], key)
        })
    }


    /// The accumulator of `key`, made by `make` if the key is new to the window; the
    /// slot counts as changed.
    fn accumulator(&mut self, key: &[u8], make: impl FnOnce() -> A) -> &mut A {
        let hash = key::hash(key);
        let Pane {
            keys,
            slots,
            changed,
            ..
        } = self;
        let entry = slots.entry(
            hash,
            |slot| key::equal(&keys[slot.offset as usize..][..slot.len as usize], key),
            |slot| slot.hash,
        );
        match entry {
            Entry::Occupied(occupied) => {
                let slot = occupied.into_mut();
                if !slot.changed {
                    slot.changed = true;
                    changed.push((slot.offset, slot.len));
                }
                &mut slot.accumulator
            }
            Entry::Vacant(vacant) => {
                let offset =
                    u32::try_from(keys.len()).expect("the keys of one window stay below 4 GiB");
                keys.extend_from_slice(key);
                let len = key.len() as u32;
                changed.push((offset, len));
                let slot = Slot {
                    hash,
                    offset,
                    len,
                    changed: true,
                    accumulator: make(),
                };
                &mut vacant.insert(slot).into_mut().accumulator
            }
        }
    }

    /// Adds a restored accumulator of a key new to the window, unchanged.
    fn restore(&mut self, key: &[u8], accumulator: A) -> Result<(), Error> {
        let hash = key::hash(key);
        if self.find(hash, key).is_some() {
            return Err(duplicate(key));
        }
        let offset =
            u32::try_from(self.keys.len()).expect("the keys of one window stay below 4 GiB");
        self.keys.extend_from_slice(key);
        let slot = Slot {
            hash,
            offset,
            len: key.len() as u32,
            changed: false,
            accumulator,
        };
        self.slots.insert_unique(hash, slot, |slot| slot.hash);
        Ok(())
    }

    /// Clears the change flags and returns the keys that had one set.
    fn take_changed(&mut self, into: &mut Vec<Box<[u8]>>) {
        for (offset, len) in self.changed.drain(..) {
            let key = &self.keys[offset as usize..][..len as usize];
            let hash = key::hash(key);
            let keys = &self.keys;
            if let Some(slot) = self.slots.find_mut(hash, |slot| slot.offset == offset) {
                slot.changed = false;
            }
            into.push(keys[offset as usize..][..len as usize].into());
        }
    }

    /// Every (key, accumulator) ordered by key bytes.
    fn into_sorted(self) -> (Vec<u8>, Vec<Slot<A>>) {
        let mut slots: Vec<Slot<A>> = self.slots.into_iter().collect();
        let keys = self.keys;
        slots.sort_unstable_by(|a, b| {
            keys[a.offset as usize..][..a.len as usize]
                .cmp(&keys[b.offset as usize..][..b.len as usize])
        });
        (keys, slots)
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
            round: None,
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
        self.windows[index].accumulator(key, A::default)
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
        self.windows.iter().map(|pane| pane.slots.len()).sum()
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
            let (keys, slots) = pane.into_sorted();
            for slot in slots {
                let key = &keys[slot.offset as usize..][..slot.len as usize];
                self.fired.push(key.into());
                emit(window, key, slot.accumulator);
            }
        }
    }
}

impl<A: Serialize> FixedWindows<A> {
    /// Hands over each key whose windows changed since the last round: all its open
    /// windows, or its removal once none is left; up to a full `changes` per call.
    pub(super) fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        let mut round = match self.round.take() {
            Some(round) => round,
            None => {
                let mut keys = std::mem::take(&mut self.fired);
                for pane in &mut self.windows {
                    pane.take_changed(&mut keys);
                }
                Round::new(keys)
            }
        };
        let mut windows: Vec<(i64, &A)> = Vec::new();
        let drained = round.hand_over(|key| {
            let hash = key::hash(key);
            windows.clear();
            windows.extend(
                self.windows
                    .iter()
                    .filter_map(|pane| Some((pane.start, &pane.find(hash, key)?.accumulator))),
            );
            if windows.is_empty() {
                return Ok(changes.remove(key));
            }
            let entry = EntryRef {
                size_ms: self.size,
                windows: &windows,
            };
            changes.put(key, &entry)
        })?;
        drop(windows);
        if drained == Drained::More {
            self.round = Some(round);
        }
        Ok(drained)
    }
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
        for (start, accumulator) in entry.windows {
            let index = self.pane_index(start);
            self.windows[index].restore(key, accumulator)?;
        }
        Ok(())
    }

    /// Ends a restore: windows ending at or before `watermark` fired before the
    /// checkpoint, so a record for one of them is late.
    pub(super) fn restored(&mut self, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }
}
