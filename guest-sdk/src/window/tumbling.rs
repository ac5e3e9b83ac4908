//! Tumbling windows: fixed-size, non-overlapping, aligned to epoch 0, so every
//! record falls in exactly one window per key.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Window;
use super::fixed::{FixedWindows, WindowsEntry};
use crate::error::Error;
use crate::state::{Changes, Drained, KeyedState};

/// One accumulator of type `A` per key and tumbling window.
///
/// A record at `ts` belongs to `[ts - ts.rem_euclid(size), +size)`. A record whose
/// window has already fired is late: it is dropped and counted.
///
/// ```
/// use weir_guest::window::TumblingWindows;
///
/// let mut counts = TumblingWindows::<u64>::new(1_000)?;
/// for (key, ts) in [(&b"a"[..], 10), (b"b", 20), (b"a", 999), (b"a", 1_000)] {
///     *counts.accumulator(key, ts).unwrap() += 1;
/// }
/// let mut fired = Vec::new();
/// counts.fire(1_000, |window, key, n| fired.push((window.start, key.to_vec(), n)));
/// assert_eq!(fired, [(0, b"a".to_vec(), 2), (0, b"b".to_vec(), 1)]);
/// assert!(counts.accumulator(b"a", 999).is_none(), "late: window [0, 1000) fired");
/// # Ok::<(), weir_guest::Error>(())
/// ```
/// As keyed state, a key's entry is a [`WindowsEntry`]: each open window by start.
#[derive(Debug)]
pub struct TumblingWindows<A> {
    windows: FixedWindows<A>,
}

impl<A> TumblingWindows<A> {
    /// Windows of `size_ms` milliseconds.
    pub fn new(size_ms: i64) -> Result<Self, Error> {
        if size_ms <= 0 {
            return Err(Error::new(format!(
                "tumbling window size must be a positive number of milliseconds, got {size_ms}"
            )));
        }
        Ok(Self {
            windows: FixedWindows::new(size_ms),
        })
    }

    /// The window size in milliseconds.
    pub fn size_ms(&self) -> i64 {
        self.windows.size()
    }

    /// The window a record at `timestamp` belongs to.
    pub fn window_of(&self, timestamp: i64) -> Window {
        self.windows
            .window(timestamp - timestamp.rem_euclid(self.windows.size()))
    }

    /// The accumulator of `key` in the window of `timestamp`, created with
    /// `A::default()` if new; `None` (and counted) if that window already fired.
    pub fn accumulator(&mut self, key: &[u8], timestamp: i64) -> Option<&mut A>
    where
        A: Default,
    {
        let start = self.window_of(timestamp).start;
        if self.windows.has_fired(start) {
            self.windows.count_late();
            return None;
        }
        Some(self.windows.accumulator(start, key))
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

impl<A: Serialize + DeserializeOwned + 'static> KeyedState for TumblingWindows<A> {
    type Entry = WindowsEntry<A>;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        self.windows.drain_changes(changes)
    }

    fn restore_entry(&mut self, key: &[u8], entry: WindowsEntry<A>) -> Result<(), Error> {
        self.windows.restore_entry(key, entry)
    }

    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        self.windows.restored(watermark);
        Ok(())
    }
}
