//! Key groups (DESIGN.md §5): the unit keyed state is stored, restored and moved in.
//! A key's group is the Java partitioner's hash modulo `G`, so when `G` is a multiple
//! of the input's partition count and the input was produced by Kafka's default
//! partitioner, partition `p` holds exactly the groups `g ≡ p (mod partitions)`. A
//! subtask owns a contiguous range of groups, so a rescale moves whole ranges.
//!
//! A record without a key belongs where the empty key does: an operator keeps such a
//! record's state under the empty key (WIT `weir:operator@0.2`), so both must agree.

use std::ops::Range;

/// The smallest default group count.
const MIN_DEFAULT_GROUPS: u32 = 128;

/// A job's key groups: their number, fixed when the job first starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyGroups {
    count: u32,
}

impl KeyGroups {
    pub(crate) fn new(count: u32) -> KeyGroups {
        assert!(count > 0, "a job has at least one key group");
        KeyGroups { count }
    }

    /// The smallest multiple of `partitions` that is at least 128.
    pub(crate) fn default_for(partitions: u32) -> KeyGroups {
        assert!(partitions > 0, "an input topic has at least one partition");
        KeyGroups::new(MIN_DEFAULT_GROUPS.div_ceil(partitions) * partitions)
    }

    pub(crate) fn count(self) -> u32 {
        self.count
    }

    /// The group of a record's key: `toPositive(murmur2(key)) % G`, as Kafka's Java
    /// default partitioner computes a partition; no key counts as the empty key.
    pub(crate) fn group_of(self, key: Option<&[u8]>) -> u32 {
        (murmur2(key.unwrap_or_default()) & 0x7fff_ffff) % self.count
    }

    /// The subtask of `parallelism` that a record with `key` goes to.
    pub(crate) fn subtask_for(self, key: Option<&[u8]>, parallelism: usize) -> usize {
        self.owner(self.group_of(key), parallelism as u32) as usize
    }

    /// The subtask of `parallelism` that owns `group` (`parallelism` ≤ G).
    pub(crate) fn owner(self, group: u32, parallelism: u32) -> u32 {
        debug_assert!(group < self.count && (1..=self.count).contains(&parallelism));
        (u64::from(group) * u64::from(parallelism) / u64::from(self.count)) as u32
    }

    /// The contiguous groups `subtask` of `parallelism` owns: the inverse of `owner`.
    pub(crate) fn range(self, subtask: u32, parallelism: u32) -> Range<u32> {
        debug_assert!(subtask < parallelism && parallelism <= self.count);
        let start = |i: u32| (u64::from(i) * u64::from(self.count)).div_ceil(u64::from(parallelism)) as u32;
        start(subtask)..start(subtask + 1)
    }
}

/// The input partitions one process of a scaled-out job owns (DESIGN.md §7) and so the
/// key groups it may keep state in: group `g` travels in partition `g mod partitions`
/// when `G` is a multiple of the partition count and the input is co-partitioned by key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shard {
    /// `owned[p]`: partition `p` is this process's.
    owned: Vec<bool>,
}

impl Shard {
    /// The partitions `owned` of an input of `partitions` partitions.
    pub(crate) fn new(partitions: u32, owned: impl IntoIterator<Item = i32>) -> Shard {
        let mut flags = vec![false; partitions as usize];
        for partition in owned {
            flags[usize::try_from(partition).expect("partitions are not negative")] = true;
        }
        Shard { owned: flags }
    }

    /// The input partition that carries `group`.
    pub(crate) fn partition_of(&self, group: u32) -> i32 {
        (group as usize % self.owned.len()) as i32
    }

    pub(crate) fn owns_partition(&self, partition: i32) -> bool {
        usize::try_from(partition).ok().and_then(|p| self.owned.get(p)).is_some_and(|&owned| owned)
    }

    pub(crate) fn owns(&self, group: u32) -> bool {
        self.owned[group as usize % self.owned.len()]
    }

    /// The groups of `key_groups` this process owns, in order.
    pub(crate) fn groups(&self, key_groups: KeyGroups) -> impl Iterator<Item = u32> + '_ {
        (0..key_groups.count()).filter(|&group| self.owns(group))
    }

    /// What to say when a record of key group `group` turns up in a process that does
    /// not own it (`read_from`: the partition it was read from, at the first stage).
    pub(crate) fn not_co_partitioned(&self, topic: &str, group: u32, read_from: Option<i32>) -> String {
        let partition = self.partition_of(group);
        let place = match read_from {
            Some(read) => format!("was read from partition {read} of topic `{topic}`"),
            None => "was emitted by an operator (it changed the key)".to_string(),
        };
        format!(
            "a record whose key is in key group {group}, which belongs with input partition {partition}, {place}: \
             the input is not co-partitioned by key, so with scale_out the state of one key would be kept by \
             several processes. Produce `{topic}` keyed with Kafka's default partitioner (murmur2), keep keys \
             unchanged between keyed operators (re-keying needs a job that writes a Kafka topic in between), or \
             run one process (scale_out = false)"
        )
    }
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), byte for byte.
pub(crate) fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().expect("chunks of 4"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // Values from the Java client's own partitioner tests.
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32, -58897971);
    }

    #[test]
    fn the_default_is_the_smallest_multiple_of_the_partitions_from_128() {
        for (partitions, groups) in [(1, 128), (3, 129), (4, 128), (6, 132), (128, 128), (200, 200)] {
            assert_eq!(KeyGroups::default_for(partitions).count(), groups, "{partitions} partitions");
        }
    }

    #[test]
    fn a_partition_holds_the_groups_congruent_to_it() {
        let partitions = 6;
        let groups = KeyGroups::default_for(partitions);
        for i in 0..2000 {
            let key = format!("user-{i}");
            let partition = (murmur2(key.as_bytes()) & 0x7fff_ffff) % partitions;
            assert_eq!(groups.group_of(Some(key.as_bytes())) % partitions, partition, "{key}");
        }
        assert_eq!(groups.group_of(None), groups.group_of(Some(b"")));
    }

    #[test]
    fn a_shard_owns_the_groups_of_its_partitions() {
        let groups = KeyGroups::default_for(6);
        let shard = Shard::new(6, [1, 4]);
        let owned: Vec<u32> = shard.groups(groups).collect();
        assert_eq!(owned.len(), 2 * groups.count() as usize / 6);
        assert!(owned.iter().all(|g| g % 6 == 1 || g % 6 == 4));
        for i in 0..2000 {
            let key = format!("user-{i}");
            let partition = ((murmur2(key.as_bytes()) & 0x7fff_ffff) % 6) as i32;
            let group = groups.group_of(Some(key.as_bytes()));
            assert_eq!(shard.partition_of(group), partition, "{key}");
            assert_eq!(shard.owns(group), partition == 1 || partition == 4, "{key}");
        }
    }

    #[test]
    fn subtasks_own_contiguous_ranges_that_cover_every_group_once() {
        for count in [1, 7, 128, 129] {
            let groups = KeyGroups::new(count);
            for parallelism in (1..=count.min(40)).chain([count]) {
                let mut next = 0;
                for subtask in 0..parallelism {
                    let range = groups.range(subtask, parallelism);
                    assert_eq!(range.start, next, "G={count} p={parallelism} subtask {subtask}");
                    assert!(!range.is_empty(), "G={count} p={parallelism} subtask {subtask} owns nothing");
                    for group in range.clone() {
                        assert_eq!(groups.owner(group, parallelism), subtask, "G={count} p={parallelism} group {group}");
                    }
                    next = range.end;
                }
                assert_eq!(next, count);
            }
        }
    }
}
