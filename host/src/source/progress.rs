//! Event-time progress of one source task: each partition's watermark is its max event
//! time seen minus the allowed out-of-orderness, and the task's is the least of them,
//! except that, with `[source] idle_timeout_ms`, a partition that has read nothing for
//! that long stops holding it back until it reads again (DESIGN.md §4).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::PartitionState;

/// What a source task tells downstream about event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Event time of every active partition has reached this value.
    Watermark(i64),
    /// Every partition is idle: the task holds no watermark back until it reads again.
    Idle,
}

/// Which partitions are idle, and since when the others have read nothing.
#[derive(Debug)]
pub(crate) struct Activity {
    timeout: Option<Duration>,
    /// Active partitions: their next offset when last looked at, and when it last moved.
    quiet_since: BTreeMap<i32, (i64, Instant)>,
    /// Idle partitions and their next offset when they went idle.
    idle: BTreeMap<i32, i64>,
}

impl Activity {
    /// Every partition starts active, as if it had just read a record.
    pub(crate) fn new(timeout: Option<Duration>, partitions: &BTreeMap<i32, PartitionState>, now: Instant) -> Activity {
        let quiet_since = partitions.values().map(|p| (p.partition, (p.next_offset, now))).collect();
        Activity { timeout, quiet_since, idle: BTreeMap::new() }
    }

    /// A partition the task reads from now on: active, as if it had just read a record.
    pub(crate) fn add(&mut self, partition: i32, next_offset: i64, now: Instant) {
        self.quiet_since.insert(partition, (next_offset, now));
    }

    /// Partitions that read nothing for the idle timeout and are not idle yet. Call it
    /// now and then (every second): a partition read since the last call starts over.
    pub(crate) fn quiet(&mut self, partitions: &BTreeMap<i32, PartitionState>, now: Instant) -> Vec<i32> {
        let Some(timeout) = self.timeout else { return Vec::new() };
        let mut quiet = Vec::new();
        for (partition, (offset, since)) in &mut self.quiet_since {
            let next_offset = partitions[partition].next_offset;
            if next_offset != *offset {
                (*offset, *since) = (next_offset, now);
            } else if now.duration_since(*since) >= timeout {
                quiet.push(*partition);
            }
        }
        quiet
    }

    /// `partition` stops holding the watermark back (it was `quiet` and has nothing to read).
    pub(crate) fn set_idle(&mut self, partition: i32, next_offset: i64) {
        if self.quiet_since.remove(&partition).is_some() {
            self.idle.insert(partition, next_offset);
        }
    }

    /// Idle partitions that have read a record since hold the watermark again; returns
    /// them. Call it after every batch, before `progress`: it looks at idle partitions only.
    pub(crate) fn wake(&mut self, partitions: &BTreeMap<i32, PartitionState>, now: Instant) -> Vec<i32> {
        let woken: Vec<i32> =
            self.idle.iter().filter(|&(p, &at)| partitions[p].next_offset != at).map(|(&p, _)| p).collect();
        for &partition in &woken {
            self.idle.remove(&partition);
            self.quiet_since.insert(partition, (partitions[&partition].next_offset, now));
        }
        woken
    }

    /// The task's progress: the least watermark of its active partitions. A partition
    /// that woke may put it behind what was sent before; downstream never goes back,
    /// it waits until the partition catches up (`OperatorTask`).
    pub(crate) fn progress(&self, partitions: &BTreeMap<i32, PartitionState>, max_out_of_orderness_ms: i64) -> Progress {
        partitions
            .values()
            .filter(|p| !self.idle.contains_key(&p.partition))
            .map(|p| p.max_timestamp.saturating_sub(max_out_of_orderness_ms))
            .min()
            .map_or(Progress::Idle, Progress::Watermark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions(states: &[(i32, i64, i64)]) -> BTreeMap<i32, PartitionState> {
        states
            .iter()
            .map(|&(partition, next_offset, max_timestamp)| (partition, PartitionState { partition, next_offset, max_timestamp }))
            .collect()
    }

    #[test]
    fn a_quiet_partition_stops_holding_the_watermark_and_holds_it_again_when_it_reads() {
        let start = Instant::now();
        let timeout = Duration::from_millis(500);
        let mut states = partitions(&[(0, 10, 1_000), (1, 0, i64::MIN)]);
        let mut activity = Activity::new(Some(timeout), &states, start);
        assert_eq!(activity.progress(&states, 0), Progress::Watermark(i64::MIN));

        // Partition 0 keeps reading, partition 1 reads nothing.
        states.get_mut(&0).unwrap().next_offset = 20;
        assert!(activity.quiet(&states, start + timeout / 2).is_empty());
        states.get_mut(&0).unwrap().next_offset = 30;
        assert_eq!(activity.quiet(&states, start + timeout), [1]);
        activity.set_idle(1, 0);
        states.get_mut(&0).unwrap().max_timestamp = 5_000;
        assert_eq!(activity.progress(&states, 100), Progress::Watermark(4_900));

        // Partition 1 reads a record far behind: it holds the watermark again, lower.
        let state = states.get_mut(&1).unwrap();
        (state.next_offset, state.max_timestamp) = (1, 2_000);
        assert_eq!(activity.wake(&states, start + 2 * timeout), [1]);
        assert_eq!(activity.progress(&states, 100), Progress::Watermark(1_900));
        assert_eq!(activity.quiet(&states, start + 2 * timeout), [0], "partition 1 read just now");
    }

    #[test]
    fn a_task_whose_partitions_are_all_idle_is_idle_and_without_a_timeout_none_is() {
        let start = Instant::now();
        let states = partitions(&[(3, 7, 1_000)]);
        let mut never = Activity::new(None, &states, start);
        assert!(never.quiet(&states, start + Duration::from_secs(3600)).is_empty());

        let mut activity = Activity::new(Some(Duration::from_secs(1)), &states, start);
        assert_eq!(activity.quiet(&states, start + Duration::from_secs(1)), [3]);
        activity.set_idle(3, 7);
        assert_eq!(activity.progress(&states, 0), Progress::Idle);
        assert!(activity.quiet(&states, start + Duration::from_secs(5)).is_empty(), "idle already");
    }
}
