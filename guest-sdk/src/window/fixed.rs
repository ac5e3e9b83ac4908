//! The store behind tumbling and sliding windows: same-size windows ordered by start
//! (hence by end: a watermark completes a prefix), each with one accumulator per key.
//! On this per-record path a lookup allocates nothing and tries the newest window first.

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::VecDeque;

use super::{NO_WATERMARK, Window, key};

#[derive(Debug)]
pub(super) struct FixedWindows<A> {
    size: i64,
    /// Open windows by ascending start.
    windows: VecDeque<Pane<A>>,
    /// The highest watermark fired: windows ending at or before it are gone.
    watermark: i64,
    /// Records dropped because all their windows had already fired.
    late: u64,
}

/// One window: its keys back to back in `keys`, and a slot per key.
#[derive(Debug)]
struct Pane<A> {
    start: i64,
    keys: Vec<u8>,
    slots: HashTable<Slot<A>>,
}

#[derive(Debug)]
struct Slot<A> {
    /// Kept so that growing the table never rehashes keys.
    hash: u64,
    offset: u32,
    len: u32,
    accumulator: A,
}

impl<A> Pane<A> {
    fn new(start: i64) -> Self {
        Self {
            start,
            keys: Vec::new(),
            slots: HashTable::new(),
        }
    }

    fn key(&self, slot: &Slot<A>) -> &[u8] {
        &self.keys[slot.offset as usize..][..slot.len as usize]
    }

    /// The accumulator of `key`, made by `make` if the key is new to the window.
    fn accumulator(&mut self, key: &[u8], make: impl FnOnce() -> A) -> &mut A {
        let hash = key::hash(key);
        let keys = &self.keys;
        let entry = self.slots.entry(
            hash,
            |slot| key::equal(&keys[slot.offset as usize..][..slot.len as usize], key),
            |slot| slot.hash,
        );
        match entry {
            Entry::Occupied(occupied) => &mut occupied.into_mut().accumulator,
            Entry::Vacant(vacant) => {
                let offset = u32::try_from(self.keys.len())
                    .expect("the keys of one window stay below 4 GiB");
                self.keys.extend_from_slice(key);
                let slot = Slot {
                    hash,
                    offset,
                    len: key.len() as u32,
                    accumulator: make(),
                };
                &mut vacant.insert(slot).into_mut().accumulator
            }
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
                emit(
                    window,
                    &keys[slot.offset as usize..][..slot.len as usize],
                    slot.accumulator,
                );
            }
        }
    }
}

/// The serialized form: every (start, key, accumulator) ordered by start then key, so
/// that one state always encodes to the same bytes.
#[derive(Serialize)]
struct Canonical<'a, A> {
    size: i64,
    watermark: i64,
    late: u64,
    windows: Vec<(i64, &'a [u8], &'a A)>,
}

#[derive(Deserialize)]
struct Owned<A> {
    size: i64,
    watermark: i64,
    late: u64,
    windows: Vec<(i64, Vec<u8>, A)>,
}

impl<A: Serialize> Serialize for FixedWindows<A> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut windows = Vec::with_capacity(self.open());
        for pane in &self.windows {
            let first = windows.len();
            windows.extend(
                pane.slots
                    .iter()
                    .map(|slot| (pane.start, pane.key(slot), &slot.accumulator)),
            );
            windows[first..].sort_unstable_by(|a, b| key::compare(a.1, b.1));
        }
        Canonical {
            size: self.size,
            watermark: self.watermark,
            late: self.late,
            windows,
        }
        .serialize(serializer)
    }
}

impl<'de, A: DeserializeOwned> Deserialize<'de> for FixedWindows<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let owned = Owned::<A>::deserialize(deserializer)?;
        if owned.size <= 0 {
            return Err(de::Error::custom(format!(
                "window size {} in snapshot is not positive",
                owned.size
            )));
        }
        let mut windows = Self::new(owned.size);
        windows.watermark = owned.watermark;
        windows.late = owned.late;
        for (start, key, accumulator) in owned.windows {
            // A canonical snapshot names each (start, key) once.
            let index = windows.pane_index(start);
            windows.windows[index].accumulator(&key, || accumulator);
        }
        Ok(windows)
    }
}
