//! A click stream with a known answer: keyed records with event times non-decreasing
//! per partition, the flush records that close every window, and the exact output
//! the window-count plugin must commit for them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

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
        self.take_with(n, |clicks, _| (clicks.next() % clicks.clocks.len() as u64) as usize)
    }

    /// The next `n` records, each in the partition the Java client's default
    /// partitioner picks for its key: input co-partitioned by key.
    pub fn take_keyed(&mut self, n: usize) -> Vec<Input> {
        self.take_with(n, |clicks, key| java_partition(key.as_bytes(), clicks.clocks.len() as i32) as usize)
    }

    fn take_with(&mut self, n: usize, partition_of: impl Fn(&mut Self, &str) -> usize) -> Vec<Input> {
        (0..n)
            .map(|_| {
                let key = format!("user-{}", self.next() % self.keys);
                let partition = partition_of(self, &key);
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

    /// As `flush`, each record under a key of its own partition.
    pub fn flush_keyed(&self) -> Vec<Input> {
        let partitions = self.clocks.len() as i32;
        (0..partitions)
            .map(|partition| {
                let key = (0..).map(|i| format!("flush-{i}")).find(|key| java_partition(key.as_bytes(), partitions) == partition);
                (partition, key.expect("some key lands in every partition").into_bytes(), b"{}".to_vec(), FLUSH_MS)
            })
            .collect()
    }
}

/// Input that arrives in `chunks` chunks of 2,500 records 300 ms apart, then the flush
/// records; `keyed`: co-partitioned by key (`take_keyed`). Returns everything produced.
pub fn produce_paced(topic: &str, seed: u64, partitions: i32, chunks: usize, keyed: bool) -> std::thread::JoinHandle<Vec<Input>> {
    let topic = topic.to_string();
    std::thread::spawn(move || produce_chunks(&topic, seed, partitions, keyed, |produced| produced < chunks))
}

/// As `produce_paced`, chunk after chunk until `Producing::finish` (at most
/// `MAX_CHUNKS`): input for as long as the faults a test waits for take to fire,
/// however slow the machine makes them.
pub fn produce_until(topic: &str, seed: u64, partitions: i32, keyed: bool) -> Producing {
    let topic = topic.to_string();
    Producing::start(move |stop| {
        produce_chunks(&topic, seed, partitions, keyed, |produced| produced < MAX_CHUNKS && !stop.load(Ordering::Acquire))
    })
}

/// Input a thread produces until `finish`; dropped unfinished (its test failed), it
/// stops. `T` is what the thread returns: by default everything it produced.
pub struct Producing<T: Send + 'static = Vec<Input>> {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<T>>,
}

impl<T: Send + 'static> Producing<T> {
    /// Runs `produce` on a thread of its own; it goes on until the flag it is given is set.
    pub fn start(produce: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Producing<T> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        Producing { stop, handle: Some(std::thread::spawn(move || produce(&flag))) }
    }

    /// Ends the input (its producer adds the flush records); returns what it produced.
    pub fn finish(mut self) -> T {
        self.stop.store(true, Ordering::Release);
        self.handle.take().expect("finished once").join().expect("producer thread")
    }
}

impl<T: Send + 'static> Drop for Producing<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Bounds `produce_until`: ten minutes of pauses alone, far more than a test waits.
const MAX_CHUNKS: usize = 2_000;

fn produce_chunks(topic: &str, seed: u64, partitions: i32, keyed: bool, more: impl Fn(usize) -> bool) -> Vec<Input> {
    let mut clicks = Clicks::new(seed, partitions, 500);
    let pace = Pace { chunk: 2_500, pause: Duration::from_millis(300), keyed };
    let mut all = produce_chunks_of(topic, &mut clicks, pace, more);
    let flush = if keyed { clicks.flush_keyed() } else { clicks.flush() };
    super::produce(topic, &flush);
    all.extend(flush);
    all
}

/// How paced input comes: chunks of `chunk` records `pause` apart; `keyed`: co-partitioned
/// by key (`Clicks::take_keyed`).
#[derive(Clone, Copy)]
pub struct Pace {
    pub chunk: usize,
    pub pause: Duration,
    pub keyed: bool,
}

/// Produces chunks of `clicks` at `pace` for as long as `more` holds of the number produced
/// so far; no flush records. Returns everything produced.
pub fn produce_chunks_of(topic: &str, clicks: &mut Clicks, pace: Pace, more: impl Fn(usize) -> bool) -> Vec<Input> {
    let mut all = Vec::new();
    let mut produced = 0;
    while more(produced) {
        let chunk = if pace.keyed { clicks.take_keyed(pace.chunk) } else { clicks.take(pace.chunk) };
        super::produce(topic, &chunk);
        all.extend(chunk);
        produced += 1;
        std::thread::sleep(pace.pause); // pacing, not synchronisation
    }
    all
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

/// The partition the Java client's default partitioner picks for a keyed record.
pub fn java_partition(key: &[u8], partitions: i32) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) % partitions as u32) as i32
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`).
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes(chunk.try_into().unwrap());
        k = k.wrapping_mul(M);
        k ^= k >> 24;
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

#[test]
fn murmur2_matches_the_java_client() {
    // Values from the Java client's own partitioner tests.
    assert_eq!(murmur2(b"21") as i32, -973932308);
    assert_eq!(murmur2(b"foobar") as i32, -790332482);
    assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985981536);
    assert_eq!(murmur2(b"a-little-bit-longer-string") as i32, -1486304829);
    assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32, -58897971);
}
