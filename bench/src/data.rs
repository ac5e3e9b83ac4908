//! The seeded input: N click records over K keys on P partitions, event time advancing
//! 100 records per millisecond, then one far-later flush record per partition. The
//! generator produces it and the checker regenerates it, so both see the same records.
//!
//! Each record's partition is drawn independently of its key, so every key lives on every
//! partition: a key-by that routed nothing would split a key's count. Partition p's event
//! time runs p × `PARTITION_LAG_MS` behind partition 0's (still non-decreasing within each
//! partition), so the parallel inputs of an operator always hold different watermarks and
//! a merge that ignored the lagging ones would fire windows early and drop their records.

/// Event time of record 0 (November 2023): in the past, so the broker never rejects it.
pub(crate) const T0: i64 = 1_700_000_000_000;
/// Records per millisecond of event time: a 10 s window holds 1 M records.
pub(crate) const PER_MS: u64 = 100;
/// Key of the flush records; their window never closes, so it never appears in output.
pub(crate) const FLUSH_KEY: &str = "flush";
/// How far after the last record the flush records are: closes every window.
const FLUSH_AFTER_MS: i64 = 3_600_000;
/// Event-time lag of partition p behind partition 0 is p times this. Smaller than the
/// 2 s of event time in a `--quick` input, so the lag crosses a window end even there.
pub(crate) const PARTITION_LAG_MS: i64 = 250;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    pub(crate) records: u64,
    pub(crate) keys: u32,
    pub(crate) partitions: i32,
    pub(crate) seed: u64,
    /// Each record in the partition Kafka's default partitioner picks for its key: input
    /// co-partitioned by key, as a scaled-out job needs.
    pub(crate) keyed: bool,
}

/// One input record, before formatting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec {
    pub(crate) partition: i32,
    pub(crate) key: u32,
    pub(crate) ts: i64,
    pub(crate) page: u32,
    pub(crate) session: u64,
}

impl Workload {
    /// The N data records in production order (event time non-decreasing on each partition).
    pub(crate) fn records(&self) -> impl Iterator<Item = Rec> + use<> {
        let (keys, partitions, keyed) = (self.keys as u64, self.partitions as u64, self.keyed);
        let mut rng = SplitMix64(self.seed);
        (0..self.records).map(move |i| {
            let key = (rng.next() % keys) as u32;
            let drawn = (rng.next() % partitions) as i32;
            let partition = if keyed { java_partition(self::key(key).as_bytes(), partitions as i32) } else { drawn };
            Rec {
                partition,
                key,
                ts: T0 + (i / PER_MS) as i64 - partition as i64 * PARTITION_LAG_MS,
                page: (rng.next() % 100_000) as u32,
                session: rng.next(),
            }
        })
    }

    /// The key of partition `partition`'s flush record: one of its own when keyed.
    pub(crate) fn flush_key(&self, partition: i32) -> String {
        if !self.keyed {
            return FLUSH_KEY.to_string();
        }
        let keyed = (0..).map(|i| format!("{FLUSH_KEY}-{i}")).find(|key| java_partition(key.as_bytes(), self.partitions) == partition);
        keyed.expect("some key lands in every partition")
    }

    /// Event time of the flush records.
    pub(crate) fn flush_ts(&self) -> i64 {
        T0 + (self.records / PER_MS) as i64 + FLUSH_AFTER_MS
    }
}

pub(crate) fn key(index: u32) -> String {
    format!("user-{index:06}")
}

/// About 100 bytes of JSON.
pub(crate) fn value(rec: &Rec) -> String {
    format!(
        "{{\"user\":\"user-{:06}\",\"page\":\"/products/{:05}\",\"action\":\"click\",\"ts\":{},\"session\":\"{:016x}\"}}",
        rec.key, rec.page, rec.ts, rec.session
    )
}

pub(crate) fn flush_value(partition: i32) -> String {
    format!("{{\"flush\":true,\"partition\":{partition}}}")
}

/// The partition the Java client's default partitioner picks for `key`.
fn java_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions as u32) as i32
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let k = u32::from_le_bytes(chunk.try_into().expect("four bytes")).wrapping_mul(M);
        h = h.wrapping_mul(M) ^ (k ^ (k >> 24)).wrapping_mul(M);
    }
    let tail = chunks.remainder();
    for (i, &byte) in tail.iter().enumerate().rev() {
        h ^= u32::from(byte) << (8 * i);
    }
    if !tail.is_empty() {
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^ (h >> 15)
}

/// Small, fast and stable across platforms and releases (unlike a library RNG's stream).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::reference::{self, Kind, WINDOW_MS, WindowCounts};

    /// The `--quick` input: what CI checks weir with.
    const QUICK: Workload = Workload { records: 200_000, keys: 100_000, partitions: 4, seed: 42, keyed: false };

    #[test]
    fn murmur2_matches_the_java_client() {
        assert_eq!(murmur2(b"21") as i32, -973932308);
        assert_eq!(murmur2(b"foobar") as i32, -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
    }

    #[test]
    fn keyed_input_is_co_partitioned_and_keeps_event_time_in_order() {
        let keyed = Workload { keyed: true, partitions: 12, ..QUICK };
        let mut last = [i64::MIN; 12];
        for r in keyed.records() {
            assert_eq!(r.partition, java_partition(key(r.key).as_bytes(), 12));
            assert!(r.ts >= last[r.partition as usize]);
            last[r.partition as usize] = r.ts;
        }
        for p in 0..12 {
            assert_eq!(java_partition(keyed.flush_key(p).as_bytes(), 12), p);
        }
    }

    #[test]
    fn event_time_never_goes_back_within_a_partition() {
        let mut last = vec![i64::MIN; QUICK.partitions as usize];
        for r in QUICK.records() {
            assert!(r.ts >= last[r.partition as usize], "partition {} went back to {}", r.partition, r.ts);
            last[r.partition as usize] = r.ts;
        }
        assert!(last.iter().all(|&t| t < QUICK.flush_ts()));
    }

    #[test]
    fn keys_are_spread_over_partitions() {
        let mut seen: HashMap<u32, (u32, HashSet<i32>)> = HashMap::new();
        for r in QUICK.records() {
            let (n, partitions) = seen.entry(r.key).or_default();
            *n += 1;
            partitions.insert(r.partition);
        }
        let repeated = seen.values().filter(|(n, _)| *n > 1).count();
        let spread = seen.values().filter(|(_, p)| p.len() > 1).count();
        // Drawn independently, a key's second record lands on another partition 3 times in 4.
        assert!(spread * 3 > repeated * 2, "of {repeated} keys with several records, {spread} are on several partitions");
    }

    /// Two source tasks (partition p goes to task p % 2) feeding one keyed operator,
    /// records in production order: what each task counts alone, and the records that are
    /// late at the operator under a given merge of the tasks' watermarks.
    fn simulate(merge: fn(i64, i64) -> i64) -> (Vec<u128>, usize) {
        let mut alone = [WindowCounts::new(WINDOW_MS), WindowCounts::new(WINDOW_MS)];
        let mut max_ts = vec![i64::MIN; QUICK.partitions as usize];
        let mut late = 0;
        for r in QUICK.records() {
            let task_watermark = |task: i32| (0..QUICK.partitions).filter(|p| p % 2 == task).map(|p| max_ts[p as usize]).min().unwrap();
            let operator_watermark = merge(task_watermark(0), task_watermark(1));
            if r.ts.div_euclid(WINDOW_MS) * WINDOW_MS + WINDOW_MS <= operator_watermark {
                late += 1;
            }
            max_ts[r.partition as usize] = max_ts[r.partition as usize].max(r.ts);
            alone[(r.partition % 2) as usize].add(r.key, r.ts);
        }
        let mut unshuffled = [alone[0].digests(), alone[1].digests()].concat();
        unshuffled.sort_unstable();
        (unshuffled, late)
    }

    #[test]
    fn a_missing_shuffle_or_a_broken_watermark_merge_changes_the_output() {
        let expected = reference::expected(Kind::WindowCount, &QUICK);
        let (unshuffled, late_with_min) = simulate(i64::min);
        assert!(!reference::compare(&expected, &unshuffled).exact(), "counting per source task gives the reference");
        assert_eq!(late_with_min, 0, "a correct engine would drop records, so the reference is not what it outputs");
        let (_, late_with_max) = simulate(i64::max);
        assert!(late_with_max > 0, "a merge that follows the leading input drops nothing");
    }
}
