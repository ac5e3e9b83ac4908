//! Sliding (hopping) windows: windows of one size starting every `slide`, aligned to
//! epoch 0, so a record falls in about `size / slide` overlapping windows per key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Window;
use super::fixed::{FixedWindows, WindowsEntry};
use crate::error::Error;
use crate::state::{Changes, Drained, KeyedState};

/// Bounds the work per record: a record updates up to this many windows.
pub const MAX_WINDOWS_PER_RECORD: i64 = 1024;

/// One accumulator of type `A` per key and sliding window.
///
/// Windows are `[k * slide, k * slide + size)` for every integer `k`. A record
/// updates each of its windows that has not fired yet; a record all of whose
/// windows fired is late: dropped and counted.
///
/// ```
/// use weir_guest::window::SlidingWindows;
///
/// // 10 s windows every 5 s: a record at 7 s is in [0, 10 s) and [5 s, 15 s).
/// let mut sums = SlidingWindows::<i64>::new(10_000, 5_000)?;
/// sums.update(b"k", 7_000, |_window, sum| *sum += 3);
/// let mut fired = Vec::new();
/// sums.fire(15_000, |window, _key, sum| fired.push((window.start, window.end, sum)));
/// assert_eq!(fired, [(0, 10_000, 3), (5_000, 15_000, 3)]);
/// # Ok::<(), weir_guest::Error>(())
/// ```
/// As keyed state, a key's entry is a [`WindowsEntry`]: each open window by start.
#[derive(Debug)]
pub struct SlidingWindows<A> {
    slide: i64,
    windows: FixedWindows<A>,
}

impl<A> SlidingWindows<A> {
    /// Windows of `size_ms` milliseconds starting every `slide_ms` milliseconds;
    /// `0 < slide_ms <= size_ms` and at most [`MAX_WINDOWS_PER_RECORD`] windows per record.
    pub fn new(size_ms: i64, slide_ms: i64) -> Result<Self, Error> {
        check(size_ms, slide_ms)?;
        Ok(Self {
            slide: slide_ms,
            windows: FixedWindows::new(size_ms),
        })
    }

    /// The window size in milliseconds.
    pub fn size_ms(&self) -> i64 {
        self.windows.size()
    }

    /// The distance between window starts in milliseconds.
    pub fn slide_ms(&self) -> i64 {
        self.slide
    }

    /// The windows a record at `timestamp` belongs to, earliest first.
    pub fn windows_of(&self, timestamp: i64) -> impl Iterator<Item = Window> + use<A> {
        let size = self.windows.size();
        let slide = self.slide;
        let offset = timestamp.rem_euclid(slide);
        let last = timestamp - offset;
        // Starts `last - k * slide` for k in 0..=earlier, each with start + size > timestamp.
        let earlier = (size - offset - 1) / slide;
        (0..=earlier).rev().filter_map(move |k| {
            let start = last.checked_sub(k * slide)?;
            Some(Window {
                start,
                end: start.saturating_add(size),
            })
        })
    }

    /// Calls `update` with the accumulator of `key` in each window of `timestamp`
    /// that has not fired, earliest first, creating accumulators with `A::default()`.
    /// Returns how many windows were updated: 0 means the record was late.
    pub fn update(
        &mut self,
        key: &[u8],
        timestamp: i64,
        mut update: impl FnMut(Window, &mut A),
    ) -> usize
    where
        A: Default,
    {
        let mut updated = 0;
        for window in self.windows_of(timestamp) {
            if !self.windows.has_fired(window.start) {
                update(window, self.windows.accumulator(window.start, key));
                updated += 1;
            }
        }
        if updated == 0 {
            self.windows.count_late();
        }
        updated
    }

    /// Fires every window with `end <= watermark`: calls `emit` for each (window, key)
    /// by window end, then key bytes, and forgets them.
    pub fn fire(&mut self, watermark: i64, emit: impl FnMut(Window, &[u8], A)) {
        self.windows.fire(watermark, emit);
    }

    /// The highest watermark fired so far (`i64::MIN` before the first).
    pub fn watermark(&self) -> i64 {
        self.windows.watermark()
    }

    /// Records dropped as late so far.
    pub fn late_records(&self) -> u64 {
        self.windows.late()
    }

    /// The number of (window, key) accumulators still open.
    pub fn open(&self) -> usize {
        self.windows.open()
    }
}

fn check(size_ms: i64, slide_ms: i64) -> Result<(), Error> {
    if size_ms <= 0 || slide_ms <= 0 || slide_ms > size_ms {
        return Err(Error::new(format!(
            "sliding windows need 0 < slide <= size (milliseconds), got size {size_ms} and \
             slide {slide_ms}"
        )));
    }
    let per_record = (size_ms - 1) / slide_ms + 1;
    if per_record > MAX_WINDOWS_PER_RECORD {
        return Err(Error::new(format!(
            "sliding windows of size {size_ms} ms every {slide_ms} ms put each record in \
             {per_record} windows; keep size / slide at most {MAX_WINDOWS_PER_RECORD}"
        )));
    }
    Ok(())
}

impl<A: Serialize + DeserializeOwned + 'static> KeyedState for SlidingWindows<A> {
    type Entry = WindowsEntry<A>;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        self.windows.drain_changes(changes)
    }

    fn restore_entry(&mut self, key: &[u8], entry: WindowsEntry<A>) -> Result<(), Error> {
        if let Some((start, _)) = entry.windows.iter().find(|(start, _)| start.rem_euclid(self.slide) != 0) {
            return Err(Error::new(format!(
                "the checkpoint holds a window starting at {start}, which windows sliding \
                 every {} ms never do; restore with the slide the job ran with, or start the \
                 job afresh",
                self.slide
            )));
        }
        self.windows.restore_entry(key, entry)
    }

    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        self.windows.restored(watermark);
        Ok(())
    }
}
