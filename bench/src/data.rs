//! The seeded input: N click records over K keys on P partitions, event time advancing
//! 100 records per millisecond, then one far-later flush record per partition. The
//! generator produces it and the checker regenerates it, so both see the same records.

/// Event time of record 0 (November 2023): in the past, so the broker never rejects it.
pub const T0: i64 = 1_700_000_000_000;
/// Records per millisecond of event time: a 10 s window holds 1 M records.
pub const PER_MS: u64 = 100;
/// Key of the flush records; their window never closes, so it never appears in output.
pub const FLUSH_KEY: &str = "flush";
/// How far after the last record the flush records are: closes every window.
const FLUSH_AFTER_MS: i64 = 3_600_000;

#[derive(Debug, Clone, Copy)]
pub struct Workload {
    pub records: u64,
    pub keys: u32,
    pub partitions: i32,
    pub seed: u64,
}

/// One input record, before formatting.
#[derive(Debug, Clone, Copy)]
pub struct Rec {
    pub partition: i32,
    pub key: u32,
    pub ts: i64,
    pub page: u32,
    pub session: u64,
}

impl Workload {
    /// The N data records in production order (event time non-decreasing on each partition).
    pub fn records(&self) -> impl Iterator<Item = Rec> + use<> {
        let (keys, partitions) = (self.keys as u64, self.partitions as u64);
        let mut rng = SplitMix64(self.seed);
        (0..self.records).map(move |i| {
            let key = (rng.next() % keys) as u32;
            Rec {
                partition: (key as u64 % partitions) as i32,
                key,
                ts: T0 + (i / PER_MS) as i64,
                page: (rng.next() % 100_000) as u32,
                session: rng.next(),
            }
        })
    }

    /// Event time of the flush records.
    pub fn flush_ts(&self) -> i64 {
        T0 + (self.records / PER_MS) as i64 + FLUSH_AFTER_MS
    }
}

pub fn key(index: u32) -> String {
    format!("user-{index:06}")
}

/// About 100 bytes of JSON.
pub fn value(rec: &Rec) -> String {
    format!(
        "{{\"user\":\"user-{:06}\",\"page\":\"/products/{:05}\",\"action\":\"click\",\"ts\":{},\"session\":\"{:016x}\"}}",
        rec.key, rec.page, rec.ts, rec.session
    )
}

pub fn flush_value(partition: i32) -> String {
    format!("{{\"flush\":true,\"partition\":{partition}}}")
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
