//! The store behind tumbling and sliding windows: windows of one fixed size, keyed by
//! start, each holding one accumulator per key.
//!
//! Windows all have the same size, so ordering them by start orders them by end, and
//! a watermark completes a prefix of the start-ordered map.

use std::collections::BTreeMap;

use serde::de::{self, DeserializeOwned};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{KeyMap, NO_WATERMARK, Window};

#[derive(Debug)]
pub(super) struct FixedWindows<A> {
    size: i64,
    windows: BTreeMap<i64, KeyMap<A>>,
    /// The highest watermark fired: windows ending at or before it are gone.
    watermark: i64,
    /// Records dropped because all their windows had already fired.
    late: u64,
}

impl<A> FixedWindows<A> {
    pub(super) fn new(size: i64) -> Self {
        debug_assert!(size > 0);
        Self {
            size,
            windows: BTreeMap::new(),
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
        // `entry_ref` copies the key only when it is new to the window.
        self.windows
            .entry(start)
            .or_default()
            .entry_ref(key)
            .or_default()
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
        self.windows.values().map(KeyMap::len).sum()
    }

    /// Removes every window with `end <= watermark` and hands over its accumulators
    /// by window end, then key bytes.
    pub(super) fn fire(&mut self, watermark: i64, mut emit: impl FnMut(Window, &[u8], A)) {
        self.watermark = self.watermark.max(watermark);
        let size = self.size;
        while let Some(first) = self.windows.first_entry() {
            let start = *first.key();
            let window = Window {
                start,
                end: start.saturating_add(size),
            };
            if window.end > watermark {
                break;
            }
            let mut fired: Vec<(Box<[u8]>, A)> = first.remove().into_iter().collect();
            fired.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            for (key, accumulator) in fired {
                emit(window, &key, accumulator);
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
        for (&start, keys) in &self.windows {
            let first = windows.len();
            windows.extend(keys.iter().map(|(key, acc)| (start, &key[..], acc)));
            windows[first..].sort_unstable_by(|a, b| a.1.cmp(b.1));
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
            windows
                .windows
                .entry(start)
                .or_default()
                .insert(key.into_boxed_slice(), accumulator);
        }
        Ok(windows)
    }
}
