//! A click stream with a known answer: keyed records with event times non-decreasing
//! per partition, the flush records that close every window, and the exact output
//! the window-count plugin must commit for them.

use std::collections::BTreeMap;

pub const START_MS: i64 = 1_700_000_000_000;
/// Far enough ahead that every window of the real records closes before it.
pub const FLUSH_MS: i64 = START_MS + 1_000_000_000;

pub type Input = (i32, Vec<u8>, Vec<u8>, i64);

/// A deterministic pseudo-random stream (xorshift64*), so a failure reproduces.
pub struct Clicks {
    state: u64,
    keys: u64,
    clocks: Vec<i64>,
}

impl Clicks {
    pub fn new(seed: u64, partitions: i32, keys: u64) -> Clicks {
        Clicks { state: seed.max(1), keys, clocks: vec![START_MS; partitions as usize] }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The next `n` records, spread over the partitions.
    pub fn take(&mut self, n: usize) -> Vec<Input> {
        (0..n)
            .map(|_| {
                let partition = (self.next() % self.clocks.len() as u64) as usize;
                let key = format!("user-{}", self.next() % self.keys);
                self.clocks[partition] += (self.next() % 40) as i64;
                let value = format!("{{\"user\":\"{key}\",\"page\":\"/p/{}\"}}", self.next() % 100);
                (partition as i32, key.into_bytes(), value.into_bytes(), self.clocks[partition])
            })
            .collect()
    }

    /// One record per partition far in the future: the watermark passes every window.
    pub fn flush(&self) -> Vec<Input> {
        (0..self.clocks.len() as i32)
            .map(|partition| (partition, b"flush".to_vec(), b"{}".to_vec(), FLUSH_MS))
            .collect()
    }
}

/// Fails unless most keys occur in every partition: a shuffle that routed nothing, or a
/// watermark that ignored some inputs, must change the output of a test that uses this.
pub fn assert_keys_spread(records: &[Input], partitions: i32) {
    let mut seen: BTreeMap<&[u8], std::collections::BTreeSet<i32>> = BTreeMap::new();
    for (partition, key, _, _) in records.iter().filter(|r| r.3 < FLUSH_MS) {
        seen.entry(key.as_slice()).or_default().insert(*partition);
    }
    let everywhere = seen.values().filter(|found| found.len() == partitions as usize).count();
    assert!(
        everywhere * 2 > seen.len(),
        "only {everywhere} of {} keys occur in all {partitions} partitions: the input cannot show a broken shuffle",
        seen.len()
    );
}

/// What window-count must emit for `records` (flush records excluded: their window
/// never closes): each (key, JSON value) with how many times it must appear (once).
pub fn window_counts(records: &[Input], window_ms: i64) -> BTreeMap<(Vec<u8>, Vec<u8>), usize> {
    let mut counts: BTreeMap<(Vec<u8>, i64), u64> = BTreeMap::new();
    for (_, key, _, timestamp) in records.iter().filter(|r| r.3 < FLUSH_MS) {
        let start = timestamp - timestamp.rem_euclid(window_ms);
        *counts.entry((key.clone(), start)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|((key, start), count)| {
            let name = String::from_utf8(key.clone()).expect("utf-8 keys");
            let value = format!(
                "{{\"key\":\"{name}\",\"window_start\":{start},\"window_end\":{},\"count\":{count}}}",
                start + window_ms
            );
            ((key, value.into_bytes()), 1)
        })
        .collect()
}

/// The committed output as the same multiset.
pub fn as_multiset(records: &[super::Read]) -> BTreeMap<(Vec<u8>, Vec<u8>), usize> {
    let mut seen = BTreeMap::new();
    for (_, key, value) in records {
        *seen.entry((key.clone().unwrap_or_default(), value.clone())).or_default() += 1;
    }
    seen
}

/// Describes how two multisets differ, for an assertion message.
pub fn difference(expected: &BTreeMap<(Vec<u8>, Vec<u8>), usize>, actual: &BTreeMap<(Vec<u8>, Vec<u8>), usize>) -> String {
    let missing: Vec<_> = expected.iter().filter(|(k, n)| actual.get(*k) != Some(n)).take(5).collect();
    let unexpected: Vec<_> = actual.iter().filter(|(k, n)| expected.get(*k) != Some(n)).take(5).collect();
    let lost = expected.keys().filter(|k| !actual.contains_key(*k)).count();
    let duplicated = actual.values().filter(|&&n| n > 1).count();
    let wrong = actual.keys().filter(|k| !expected.contains_key(*k)).count();
    format!(
        "expected {} records, got {}: {lost} lost, {duplicated} duplicated, {wrong} not in the reference; \
         e.g. missing/miscounted {:?}, unexpected {:?}",
        expected.len(),
        actual.values().sum::<usize>(),
        missing.iter().map(|((k, v), n)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v), n)).collect::<Vec<_>>(),
        unexpected.iter().map(|((k, v), n)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v), n)).collect::<Vec<_>>(),
    )
}
