//! Partitions added to a source's topic while the job runs. A job in one process looks
//! at its topics' partitions every `INTERVAL`; each new partition goes to the source
//! task a restart would give it (the source's k-th partition in order to its task
//! `k mod parallelism`, `recover::source_tasks`) and is read from its start, as a
//! restart reads a partition added since the last checkpoint. A scaled-out process
//! owns partitions through its consumer group and does not look.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::checkpoint::layout::PartitionState;

/// How often a source task asks the broker for its topic's partitions.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);

/// When a source task next looks, and which of the topic's partitions are its own.
#[derive(Debug)]
pub(crate) struct Discovery {
    parallelism: usize,
    /// The task's place among its source's tasks.
    slot: usize,
    next: Instant,
}

impl Discovery {
    pub(crate) fn new(parallelism: usize, slot: usize, now: Instant) -> Discovery {
        Discovery { parallelism, slot, next: now + INTERVAL }
    }

    /// Whether it is time to look; if so, the next look is an interval away.
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now + INTERVAL;
        true
    }

    /// Of the topic's partitions (`listed`, in order), the task's own it does not read yet.
    pub(crate) fn added(&self, listed: &[i32], read: &BTreeMap<i32, PartitionState>) -> Vec<i32> {
        let own = listed.iter().enumerate().filter(|&(k, _)| k % self.parallelism == self.slot);
        own.map(|(_, &partition)| partition).filter(|partition| !read.contains_key(partition)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(partitions: &[i32]) -> BTreeMap<i32, PartitionState> {
        let state = |partition| PartitionState { partition, next_offset: 0, max_timestamp: i64::MIN };
        partitions.iter().map(|&partition| (partition, state(partition))).collect()
    }

    #[test]
    fn a_task_takes_the_added_partitions_a_restart_would_give_it() {
        let listed = [0, 1, 2, 3, 4, 5, 6];
        // Three tasks over two partitions: the third had none.
        assert_eq!(Discovery::new(3, 0, Instant::now()).added(&listed, &read(&[0])), [3, 6]);
        assert_eq!(Discovery::new(3, 1, Instant::now()).added(&listed, &read(&[1])), [4]);
        assert_eq!(Discovery::new(3, 2, Instant::now()).added(&listed, &read(&[])), [2, 5]);
        assert!(Discovery::new(3, 2, Instant::now()).added(&listed, &read(&[2, 5])).is_empty());
    }

    #[test]
    fn it_looks_once_an_interval() {
        let start = Instant::now();
        let mut discovery = Discovery::new(1, 0, start);
        assert!(!discovery.due(start));
        assert!(discovery.due(start + INTERVAL));
        assert!(!discovery.due(start + INTERVAL + INTERVAL / 2));
        assert!(discovery.due(start + 2 * INTERVAL));
    }
}
