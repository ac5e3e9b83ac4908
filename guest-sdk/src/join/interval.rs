//! [`IntervalJoin`]: both streams of an interval join buffered per key by event time,
//! each buffered record its own state entry, evicted once no future record can match it.

use std::collections::BTreeSet;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::state::{Changes, Drained, KeyedMap, KeyedState, Part2};

/// Where a buffered record sits among its key's records: its event time, then the
/// order it arrived in among those of the same time.
type At = (i64, u32);

/// A watermark no real one is below: nothing is late before the first watermark.
const NO_WATERMARK: i64 = i64::MIN;

/// A left record and a right record of one key whose times are within the bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Match<'a, L, R> {
    /// The key both records have.
    pub key: &'a [u8],
    /// The left record's value, as given to [`IntervalJoin::left`].
    pub left: &'a L,
    /// The left record's event time.
    pub left_time: i64,
    /// The right record's value, as given to [`IntervalJoin::right`].
    pub right: &'a R,
    /// The right record's event time.
    pub right_time: i64,
}

impl<L, R> Match<'_, L, R> {
    /// The later of the two times: the event time of the pair.
    pub fn time(&self) -> i64 {
        self.left_time.max(self.right_time)
    }
}

/// An interval join of two streams (left, right) keyed alike: a left record at `tl`
/// and a right record at `tr` of the same key match when
/// `tl + lower <= tr <= tl + upper`.
///
/// Feed each record to [`left`](IntervalJoin::left) or [`right`](IntervalJoin::right):
/// it meets the buffered records of the other side that it matches, in order of time
/// (then arrival), and is buffered itself for the records still to come. So each pair
/// is found once, by whichever of its two records arrives second, whatever the order
/// of arrival. [`evict`](IntervalJoin::evict) with each watermark forgets what no
/// future record can match: a left record once `tl + upper < watermark`, a right one
/// once `tr - lower < watermark`. A record older than the watermark is late: its
/// partners may be gone, so it is dropped (and counted) rather than joined with some.
///
/// As keyed state, each buffered record is an entry of its own under its key
/// ([`Part2::First`] a left one, [`Part2::Second`] a right one): a checkpoint writes
/// the records buffered or evicted since the last one. A restored instance has the
/// buffers and watermark of the checkpoint, so the records that follow find exactly
/// the pairs they would have found: no pair twice, none lost.
///
/// ```
/// use weir_guest::join::IntervalJoin;
///
/// // A payment (right) within 100 ms after its order (left).
/// let mut join = IntervalJoin::<String, u64>::new(0, 100)?;
/// let mut pairs = Vec::new();
/// join.left(b"o1", 1_000, "order".to_owned(), |_| {})?;
/// join.right(b"o1", 1_050, 30, |m| pairs.push((m.left.clone(), *m.right, m.time())))?;
/// join.right(b"o1", 1_200, 40, |m| pairs.push((m.left.clone(), *m.right, m.time())))?;
/// assert_eq!(pairs, [("order".to_owned(), 30, 1_050)]);
/// join.evict(1_101); // the order can match no payment from 1 101 on
/// assert_eq!(join.buffered(), (0, 1)); // the payment at 1 200 still waits for orders
/// # Ok::<(), weir_guest::Error>(())
/// ```
#[derive(Debug)]
pub struct IntervalJoin<L, R> {
    sides: (KeyedMap<At, L>, KeyedMap<At, R>),
    lower: i64,
    upper: i64,
    /// The highest watermark evicted at (or restored with).
    watermark: i64,
    /// Per side, `(earliest buffered time, key)` of every key with a buffer: which
    /// keys a watermark evicts from. Derived from the buffers, so a restore rebuilds it.
    earliest: [BTreeSet<(i64, Box<[u8]>)>; 2],
    /// Late records dropped by this instance (not checkpointed).
    late: u64,
}

/// The index of each side's buffer in `earliest`.
const LEFT: usize = 0;
const RIGHT: usize = 1;

impl<L, R> IntervalJoin<L, R> {
    /// A join matching `tl + lower <= tr <= tl + upper`, in milliseconds.
    pub fn new(lower: i64, upper: i64) -> Result<Self, Error> {
        if lower > upper {
            return Err(Error::new(format!(
                "an interval join's lower bound must not exceed its upper bound, got \
                 [{lower}, {upper}] ms"
            )));
        }
        Ok(Self {
            sides: (KeyedMap::default(), KeyedMap::default()),
            lower,
            upper,
            watermark: NO_WATERMARK,
            earliest: [BTreeSet::new(), BTreeSet::new()],
            late: 0,
        })
    }

    /// The bounds `(lower, upper)` in milliseconds.
    pub fn bounds(&self) -> (i64, i64) {
        (self.lower, self.upper)
    }

    /// The watermark the join has evicted at, or was restored with (`i64::MIN` before).
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Late records this instance dropped (not checkpointed).
    pub fn late(&self) -> u64 {
        self.late
    }

    /// How many records are buffered: `(left, right)`.
    pub fn buffered(&self) -> (usize, usize) {
        (self.sides.0.len(), self.sides.1.len())
    }

    /// The earliest time a left record can have and still match a right one to come.
    fn left_horizon(&self) -> i64 {
        self.watermark.saturating_sub(self.upper)
    }

    /// The earliest time a right record can have and still match a left one to come.
    fn right_horizon(&self) -> i64 {
        self.watermark.saturating_add(self.lower)
    }
}

impl<L, R> IntervalJoin<L, R>
where
    L: Serialize + DeserializeOwned + 'static,
    R: Serialize + DeserializeOwned + 'static,
{
    /// A left record of `key` at `time`: calls `matched` for each buffered right record
    /// it matches (`time + lower <= tr <= time + upper`), by time, then arrival, and
    /// buffers it for the right records to come. `Ok(false)`: the record is late
    /// (older than the watermark), dropped and counted.
    pub fn left(
        &mut self,
        key: &[u8],
        time: i64,
        value: L,
        mut matched: impl FnMut(Match<'_, L, R>),
    ) -> Result<bool, Error> {
        if time < self.watermark {
            self.late += 1;
            return Ok(false);
        }
        let from = (time.saturating_add(self.lower), 0);
        let to = (time.saturating_add(self.upper), u32::MAX);
        for (&(right_time, _), right) in self.sides.1.range(key, from..=to) {
            matched(Match {
                key,
                left: &value,
                left_time: time,
                right,
                right_time,
            });
        }
        if time >= self.left_horizon() {
            let horizon = &mut self.earliest[LEFT];
            buffer(&mut self.sides.0, horizon, key, time, value)?;
        }
        Ok(true)
    }

    /// A right record of `key` at `time`: calls `matched` for each buffered left record
    /// it matches (`tl + lower <= time <= tl + upper`), by time, then arrival, and
    /// buffers it for the left records to come. `Ok(false)`: the record is late, dropped
    /// and counted.
    pub fn right(
        &mut self,
        key: &[u8],
        time: i64,
        value: R,
        mut matched: impl FnMut(Match<'_, L, R>),
    ) -> Result<bool, Error> {
        if time < self.watermark {
            self.late += 1;
            return Ok(false);
        }
        let from = (time.saturating_sub(self.upper), 0);
        let to = (time.saturating_sub(self.lower), u32::MAX);
        for (&(left_time, _), left) in self.sides.0.range(key, from..=to) {
            matched(Match {
                key,
                left,
                left_time,
                right: &value,
                right_time: time,
            });
        }
        if time >= self.right_horizon() {
            let horizon = &mut self.earliest[RIGHT];
            buffer(&mut self.sides.1, horizon, key, time, value)?;
        }
        Ok(true)
    }

    /// Event time reached `watermark`: forgets every buffered record no record to come
    /// can match, and makes records older than `watermark` late. A watermark below one
    /// seen before changes nothing.
    pub fn evict(&mut self, watermark: i64) {
        if watermark <= self.watermark {
            return;
        }
        self.watermark = watermark;
        let horizon = self.left_horizon();
        evict_side(&mut self.sides.0, &mut self.earliest[LEFT], horizon);
        let horizon = self.right_horizon();
        evict_side(&mut self.sides.1, &mut self.earliest[RIGHT], horizon);
    }
}

/// Buffers `value` of `key` at `time` after the key's records of that time, and keeps
/// the key's earliest time in `earliest`.
fn buffer<V: Serialize + DeserializeOwned + 'static>(
    side: &mut KeyedMap<At, V>,
    earliest: &mut BTreeSet<(i64, Box<[u8]>)>,
    key: &[u8],
    time: i64,
    value: V,
) -> Result<(), Error> {
    let first = side.entries(key).next().map(|(&(first, _), _)| first);
    let seq = match side.range(key, (time, 0)..=(time, u32::MAX)).next_back() {
        None => 0,
        Some((&(_, last), _)) => last.checked_add(1).ok_or_else(|| {
            Error::new(format!(
                "interval join: key b\"{}\" buffers more than {} records at time {time}",
                key.escape_ascii(),
                u32::MAX
            ))
        })?,
    };
    side.insert(key, (time, seq), value);
    match first {
        None => {
            earliest.insert((time, key.into()));
        }
        Some(first) if time < first => {
            let mut moved = (first, Box::<[u8]>::from(key));
            let indexed = earliest.remove(&moved);
            debug_assert!(indexed, "a key with a buffer is in the index");
            moved.0 = time;
            earliest.insert(moved);
        }
        Some(_) => {}
    }
    Ok(())
}

/// Removes the records older than `horizon` from `side`, key by key from the earliest.
fn evict_side<V: Serialize + DeserializeOwned + 'static>(
    side: &mut KeyedMap<At, V>,
    earliest: &mut BTreeSet<(i64, Box<[u8]>)>,
    horizon: i64,
) {
    let mut old = Vec::new();
    while earliest.first().is_some_and(|(time, _)| *time < horizon) {
        let Some((_, key)) = earliest.pop_first() else {
            break;
        };
        old.clear();
        old.extend(side.range(&key, ..(horizon, 0)).map(|(&at, _)| at));
        for at in &old {
            side.remove(&key, at);
        }
        if let Some((&(next, _), _)) = side.entries(&key).next() {
            earliest.insert((next, key));
        }
    }
}

/// Rebuilds the index of each key's earliest buffered time.
fn index<V>(side: &KeyedMap<At, V>) -> BTreeSet<(i64, Box<[u8]>)> {
    let mut index = BTreeSet::new();
    let mut previous: Option<&[u8]> = None;
    // Each key's entries come together, earliest first.
    for (key, &(time, _), _) in side.iter() {
        if previous != Some(key) {
            index.insert((time, key.into()));
            previous = Some(key);
        }
    }
    index
}

impl<L, R> KeyedState for IntervalJoin<L, R>
where
    L: Serialize + DeserializeOwned + 'static,
    R: Serialize + DeserializeOwned + 'static,
{
    type Entry = Part2<L, R>;
    const SUB_KEYS: bool = true;

    fn drain_changes(&mut self, changes: &mut Changes) -> Result<Drained, Error> {
        self.sides.drain_changes(changes)
    }

    fn restore_entry(&mut self, key: &[u8], entry: Self::Entry) -> Result<(), Error> {
        self.sides.restore_entry(key, entry)
    }

    fn restore_under(&mut self, key: &[u8], sub: &[u8], entry: Self::Entry) -> Result<(), Error> {
        self.sides.restore_under(key, sub, entry)
    }

    /// The instance had reached `watermark`: records older are late, as they were
    /// before the restore; the index of earliest times is rebuilt from the buffers.
    fn restored(&mut self, watermark: i64) -> Result<(), Error> {
        self.sides.restored(watermark)?;
        self.watermark = self.watermark.max(watermark);
        self.earliest = [index(&self.sides.0), index(&self.sides.1)];
        Ok(())
    }
}
