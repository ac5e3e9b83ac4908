//! Session windows: per key, records closer than a gap form one session, complete
//! once the watermark passes its last record plus the gap. Lazy timers (one per key,
//! never later than its earliest session end) keep extending a session queue-free.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{KeyMap, Merge, NO_WATERMARK, Window};
use crate::key;
use crate::error::Error;
use crate::state::{Changes, Drained, KeyedState, Round, duplicate};

/// One accumulator of type `A` per key and session.
///
/// A record at `ts` opens the session `[ts, ts + gap)`; sessions of one key that
/// overlap or touch merge (their accumulators through [`Merge`]). A session fires
/// when the watermark reaches its end. A record that would open a session already
/// complete (`ts + gap <= watermark`) and merges with none is late: dropped and
/// counted.
///
/// ```
/// use weir_guest::window::{Merge, SessionWindows};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Clicks(u32);
/// impl Merge for Clicks {
///     fn merge(&mut self, later: Self) { self.0 += later.0 }
/// }
///
/// let mut sessions = SessionWindows::<Clicks>::new(100)?;
/// for ts in [0, 50, 400] {
///     sessions.update(b"user", ts, |clicks| clicks.0 += 1);
/// }
/// let mut fired = Vec::new();
/// sessions.fire(1_000, |window, _key, clicks| fired.push((window.start, window.end, clicks.0)));
/// assert_eq!(fired, [(0, 150, 2), (400, 500, 1)]);
/// # Ok::<(), weir_guest::Error>(())
/// ```
///
/// As keyed state, a key's entry is a [`SessionEntry`]: its open sessions.
#[derive(Debug)]
pub struct SessionWindows<A> {
    gap: i64,
    keys: KeyMap<Sessions<A>>,
    /// (time, key) wake-ups, earliest first; a wake-up whose time is not its key's
    /// `next_timer` any more is stale and skipped.
    timers: BinaryHeap<Reverse<(i64, Box<[u8]>)>>,
    watermark: i64,
    /// Records dropped as late (not checkpointed).
    late: u64,
    /// Keys changed since the last snapshot round; a removed key may appear twice.
    changed: Vec<Box<[u8]>>,
    /// The snapshot round being handed over.
    round: Option<Round>,
}

/// One key's open sessions as a checkpoint stores them: the gap (so a restore with
/// another gap is refused) and each session with its accumulator, by start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry<A> {
    /// The gap the entry was written with, in milliseconds.
    pub gap_ms: i64,
    /// Each open session and its accumulator, by start; none overlap or touch.
    pub sessions: Vec<(Window, A)>,
}

/// [`SessionEntry`] borrowed: serializes to the same bytes.
#[derive(Serialize)]
struct EntryRef<'a, A> {
    gap_ms: i64,
    sessions: &'a [Session<A>],
}

/// One key's open sessions, ordered by start; they neither overlap nor touch, so
/// their ends are ordered too.
#[derive(Debug)]
struct Sessions<A> {
    sessions: Vec<Session<A>>,
    /// The time of this key's live timer; never later than the first session's end.
    next_timer: i64,
    /// Set on the first change since the last snapshot round.
    changed: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Session<A> {
    window: Window,
    accumulator: A,
}

impl<A: Merge> SessionWindows<A> {
    /// Sessions that close after `gap_ms` milliseconds without a record.
    pub fn new(gap_ms: i64) -> Result<Self, Error> {
        if gap_ms <= 0 {
            return Err(Error::new(format!(
                "session gap must be a positive number of milliseconds, got {gap_ms}"
            )));
        }
        Ok(Self {
            gap: gap_ms,
            keys: KeyMap::default(),
            timers: BinaryHeap::new(),
            watermark: NO_WATERMARK,
            late: 0,
            changed: Vec::new(),
            round: None,
        })
    }

    /// The gap in milliseconds.
    pub fn gap_ms(&self) -> i64 {
        self.gap
    }

    /// Adds a record at `timestamp` to `key`'s session, opening or merging sessions
    /// as needed, and calls `update` with that session's accumulator (new ones start
    /// as `A::default()`). Returns false if the record was late and dropped.
    pub fn update(&mut self, key: &[u8], timestamp: i64, update: impl FnOnce(&mut A)) -> bool
    where
        A: Default,
    {
        let record = Window {
            start: timestamp,
            end: timestamp.saturating_add(self.gap),
        };
        let Some(sessions) = self.keys.get_mut(key) else {
            if record.end <= self.watermark {
                self.late += 1;
                return false;
            }
            let mut accumulator = A::default();
            update(&mut accumulator);
            let key: Box<[u8]> = key.into();
            self.timers.push(Reverse((record.end, key.clone())));
            self.changed.push(key.clone());
            self.keys.insert(
                key,
                Sessions {
                    sessions: vec![Session {
                        window: record,
                        accumulator,
                    }],
                    next_timer: record.end,
                    changed: true,
                },
            );
            return true;
        };
        if !sessions.changed {
            sessions.changed = true;
            self.changed.push(key.into());
        }
        let list = &mut sessions.sessions;
        // Sessions ending before the record starts come first; those starting at or
        // before its end overlap it.
        let first = list.partition_point(|s| s.window.end < record.start);
        let last = first + list[first..].partition_point(|s| s.window.start <= record.end);
        if first == last {
            if record.end <= self.watermark {
                self.late += 1;
                return false;
            }
            let mut accumulator = A::default();
            update(&mut accumulator);
            list.insert(
                first,
                Session {
                    window: record,
                    accumulator,
                },
            );
            if record.end < sessions.next_timer {
                sessions.next_timer = record.end;
                self.timers.push(Reverse((record.end, key.into())));
            }
            return true;
        }
        // The record bridges sessions first..last: fold them into the first. Ends only
        // grow, so the key's timer stays early enough.
        for _ in first + 1..last {
            let later = list.remove(first + 1);
            let target = &mut list[first];
            target.window.end = target.window.end.max(later.window.end);
            target.accumulator.merge(later.accumulator);
        }
        let target = &mut list[first];
        target.window.start = target.window.start.min(record.start);
        target.window.end = target.window.end.max(record.end);
        update(&mut target.accumulator);
        true
    }

    /// Fires every session with `end <= watermark`: calls `emit` for each by end,
    /// then key bytes, then start, and forgets them.
    pub fn fire(&mut self, watermark: i64, mut emit: impl FnMut(Window, &[u8], A)) {
        self.watermark = self.watermark.max(watermark);
        let mut fired: Vec<(Window, Box<[u8]>, A)> = Vec::new();
        while let Some(Reverse((time, _))) = self.timers.peek() {
            if *time > watermark {
                break;
            }
            let Some(Reverse((time, key))) = self.timers.pop() else {
                break;
            };
            let Some(sessions) = self.keys.get_mut(&key) else {
                continue;
            };
            if sessions.next_timer != time {
                continue;
            }
            let due = sessions
                .sessions
                .partition_point(|s| s.window.end <= watermark);
            if due > 0 && !sessions.changed {
                sessions.changed = true;
                self.changed.push(key.clone());
            }
            for session in sessions.sessions.drain(..due) {
                fired.push((session.window, key.clone(), session.accumulator));
            }
            match sessions.sessions.first() {
                None => {
                    self.keys.remove(&key);
                }
                Some(next) => {
                    sessions.next_timer = next.window.end;
                    self.timers.push(Reverse((next.window.end, key)));
                }
            }
        }
        fired.sort_unstable_by(|a, b| {
            a.0.end
                .cmp(&b.0.end)
                .then_with(|| key::compare(&a.1, &b.1))
                .then(a.0.start.cmp(&b.0.start))
        });
        for (window, key, accumulator) in fired {
            emit(window, &key, accumulator);
        }
    }

    /// The highest watermark fired so far (`i64::MIN` before the first).
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Records dropped as late so far.
    pub fn late_records(&self) -> u64 {
        self.late
    }

    /// The number of sessions still open, over all keys.
    pub fn open(&self) -> usize {
        self.keys.values().map(|s| s.sessions.len()).sum()
    }
}

impl<A: Merge + Serialize + DeserializeOwned + 'static> KeyedState for SessionWindows<A> {
    type Entry = SessionEntry<A>;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        let mut round = match self.round.take() {
            Some(round) => round,
            None => Round::new(std::mem::take(&mut self.changed)),
        };
        let gap_ms = self.gap;
        let drained = round.hand_over(|key| match self.keys.get_mut(key) {
            Some(sessions) => {
                let entry = EntryRef {
                    gap_ms,
                    sessions: &sessions.sessions,
                };
                let taken = changes.put(key, &entry)?;
                sessions.changed &= !taken;
                Ok(taken)
            }
            None => Ok(changes.remove(key)),
        })?;
        if drained == Drained::More {
            self.round = Some(round);
        }
        Ok(drained)
    }

    fn restore_entry(&mut self, key: &[u8], entry: SessionEntry<A>) -> Result<(), Error> {
        if entry.gap_ms != self.gap {
            return Err(Error::new(format!(
                "the checkpoint holds sessions with a {} ms gap but these sessions have a {} ms \
                 gap; restore with the gap the job ran with, or start the job afresh",
                entry.gap_ms, self.gap
            )));
        }
        let ordered = entry
            .sessions
            .windows(2)
            .all(|w| w[0].0.end < w[1].0.start);
        let Some(first) = entry.sessions.first().filter(|_| ordered) else {
            return Err(Error::new(
                "the checkpoint holds a key whose sessions are empty, unordered or overlapping",
            ));
        };
        if self.keys.contains_key(key) {
            return Err(duplicate(key));
        }
        let key: Box<[u8]> = key.into();
        let next_timer = first.0.end;
        self.timers.push(Reverse((next_timer, key.clone())));
        let sessions = entry
            .sessions
            .into_iter()
            .map(|(window, accumulator)| Session { window, accumulator })
            .collect();
        self.keys.insert(
            key,
            Sessions {
                sessions,
                next_timer,
                changed: false,
            },
        );
        Ok(())
    }

    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        self.watermark = self.watermark.max(watermark);
        Ok(())
    }
}
