//! Keyed event-time windows fired by watermarks: tumbling, sliding and session.
//! Fired windows come by end, then key bytes, so output is reproducible across
//! snapshot and restore. Each is [`KeyedState`](crate::state::KeyedState): it tracks
//! the keys it changes, and a key's entry holds all its open windows.

mod fixed;
mod session;
mod sliding;
mod tumbling;

use serde::{Deserialize, Serialize};

pub use fixed::WindowsEntry;
pub use session::{SessionEntry, SessionWindows};
pub use sliding::{MAX_WINDOWS_PER_RECORD, SlidingWindows};
pub use tumbling::TumblingWindows;

/// An event-time interval `[start, end)` in epoch milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Window {
    /// Inclusive: the first millisecond in the window.
    pub start: i64,
    /// Exclusive: the window is complete once the watermark reaches `end`.
    pub end: i64,
}

/// Combines two session accumulators when a record bridges their sessions.
pub trait Merge {
    /// Folds `later`, the accumulator of the later session, into `self`.
    fn merge(&mut self, later: Self);
}

/// Accumulators per key, hashed with a fixed seed: the same state behaves the same
/// in every instance, and no entropy is asked of the host.
type KeyMap<V> = hashbrown::HashMap<Box<[u8]>, V, foldhash::fast::FixedState>;

/// A watermark no real one is below: nothing is late before the first watermark.
const NO_WATERMARK: i64 = i64::MIN;

#[cfg(test)]
mod tests;
