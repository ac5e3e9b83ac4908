//! Which changelog partition holds a key group's records: group `g` in partition
//! `g mod C`, `C` the topic's partition count. A checkpoint's transaction writes a
//! marker into every partition it touched when it commits, and at short intervals most
//! groups change, so a changelog of one partition per group (what weir created up to
//! this placement, and still reads: `C = G`) made each commit write `G` markers: 128 at
//! the default, 200 ms of every 100 ms checkpoint (docs/benchmarks.md). A new changelog
//! has a few partitions, whatever the key groups.
//!
//! With `C` a multiple of the input's partition count, every group of a partition
//! travels in the same input partition (`g mod P`, as `Shard` places them), so each
//! changelog partition belongs to one process of a scaled-out job, as a key group does.

use crate::dataflow::KeyGroups;

/// How many partitions a new changelog has at least (fewer only with fewer key groups):
/// one for each of a restore's readers, and no more, since every partition a checkpoint
/// touches costs the broker its own batches and commit marker.
/// 8 partitions had commits of 17 / 61 ms p50 / p99 against 196 / 434 ms for 128; at
/// 100 ms checkpoints 8 cost the broker's request threads a sixth more CPU than 4
/// (docs/benchmarks.md).
const NEW_PARTITIONS: u32 = super::replay::MAX_READERS as u32;

/// A job's key groups and its changelog's partition count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placement {
    groups: KeyGroups,
    partitions: u32,
}

impl Placement {
    /// `partitions`: at least one, at most one per key group.
    pub(crate) fn new(groups: KeyGroups, partitions: u32) -> Placement {
        assert!((1..=groups.count()).contains(&partitions), "a changelog has one partition per key group at most");
        Placement { groups, partitions }
    }

    /// A new changelog's: the smallest multiple of the input's partition count that is
    /// at least [`NEW_PARTITIONS`], or one partition per key group if that is fewer.
    pub(crate) fn for_new(groups: KeyGroups, input_partitions: u32) -> Placement {
        let multiple = NEW_PARTITIONS.div_ceil(input_partitions.max(1)) * input_partitions.max(1);
        Placement::new(groups, multiple.min(groups.count()))
    }

    pub(crate) fn groups(self) -> KeyGroups {
        self.groups
    }

    pub(crate) fn partitions(self) -> u32 {
        self.partitions
    }

    /// The partition that holds `group`'s records.
    pub(crate) fn partition_of(self, group: u32) -> i32 {
        (group % self.partitions) as i32
    }

    /// The groups whose records `partition` holds, in order.
    pub(crate) fn groups_in(self, partition: i32) -> impl Iterator<Item = u32> {
        let partition = u32::try_from(partition).expect("partitions are not negative");
        (partition..self.groups.count()).step_by(self.partitions as usize)
    }

    /// Whether every group of a partition travels in one input partition of an input of
    /// `input_partitions` (a scaled-out job's processes then own whole partitions).
    pub(crate) fn follows_input(self, input_partitions: u32) -> bool {
        self.partitions.is_multiple_of(input_partitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_changelog_has_a_few_partitions_a_multiple_of_the_inputs() {
        let groups = KeyGroups::new(128);
        assert_eq!(Placement::for_new(groups, 4).partitions(), 4);
        assert_eq!(Placement::for_new(groups, 1).partitions(), 4);
        assert_eq!(Placement::for_new(groups, 3).partitions(), 6);
        assert_eq!(Placement::for_new(groups, 8).partitions(), 8);
        assert_eq!(Placement::for_new(KeyGroups::new(132), 6).partitions(), 6);
        assert_eq!(Placement::for_new(KeyGroups::new(256), 128).partitions(), 128);
        assert_eq!(Placement::for_new(KeyGroups::new(2), 1).partitions(), 2, "no more partitions than groups");
        for input in [1, 2, 3, 4, 6, 8, 12, 16] {
            let groups = KeyGroups::default_for(input);
            assert!(Placement::for_new(groups, input).follows_input(input), "{input} input partitions");
        }
    }

    #[test]
    fn every_group_is_in_exactly_one_partition() {
        let placement = Placement::new(KeyGroups::new(130), 12);
        let mut seen = vec![0; 130];
        for partition in 0..12 {
            for group in placement.groups_in(partition) {
                assert_eq!(placement.partition_of(group), partition);
                seen[group as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1));
    }

    #[test]
    fn a_partition_following_the_input_holds_groups_of_one_input_partition() {
        let (groups, input) = (KeyGroups::new(132), 6);
        let placement = Placement::for_new(groups, input);
        for partition in 0..placement.partitions() as i32 {
            let inputs: Vec<u32> = placement.groups_in(partition).map(|group| group % input).collect();
            assert!(inputs.windows(2).all(|w| w[0] == w[1]), "partition {partition}: {inputs:?}");
        }
    }
}
