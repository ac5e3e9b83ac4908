//! Per-click CPU cost of enrich driven natively by the guest SDK's `Runner`, on the
//! enrichment-join benchmark's shapes (`bench/src/join.rs`): a table of profiles
//! `{"country":..,"name":"User N","plan":..}`, then clicks keyed by user id drawn from
//! 1.1 times as many ids, so about one in eleven has no profile.
//!
//! Run: `cargo bench -p enrich --bench per_click` (`WEIR_BENCH_CLICKS`, default
//! 1 000 000, and `WEIR_BENCH_USERS`, default 300 000, set the sizes). It prints the
//! best of five passes over the clicks in ns per click, at 1 024 clicks per batch.

use std::hint::black_box;
use std::time::Instant;

use enrich::Enrich;
use weir_guest::packed::Batch;
use weir_guest::{Config, Record, Runner};

const BATCH: usize = 1024;
const RUNS: usize = 5;
const COUNTRIES: [&str; 12] = [
    "de", "fr", "uk", "us", "es", "it", "nl", "pl", "se", "br", "in", "jp",
];
const PLANS: [&str; 3] = ["free", "plus", "pro"];

/// splitmix64: the same input on every run.
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

fn size(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(key, value, timestamp)` records packed `BATCH` to a batch.
fn batches(records: impl Iterator<Item = (String, String, i64)>) -> Vec<Batch> {
    let records: Vec<_> = records.collect();
    records
        .chunks(BATCH)
        .map(|chunk| {
            let records: Vec<_> = chunk
                .iter()
                .map(|(k, v, ts)| Record::new(Some(k.as_bytes()), v.as_bytes(), *ts))
                .collect();
            Batch::pack(&records)
        })
        .collect()
}

fn main() {
    let (clicks, users) = (
        size("WEIR_BENCH_CLICKS", 1_000_000),
        size("WEIR_BENCH_USERS", 300_000),
    );
    let mut rng = SplitMix64(11);
    let profiles = batches((0..users).map(|user| {
        let h = rng.next();
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        let country = COUNTRIES[((u * u) * COUNTRIES.len() as f64) as usize];
        let plan = PLANS[(h % 3) as usize];
        let value =
            format!("{{\"country\":\"{country}\",\"name\":\"User {user}\",\"plan\":\"{plan}\"}}");
        (format!("user-{user:06}"), value, 0)
    }));
    let ids = users + users / 10;
    let click_batches = batches((0..clicks).map(|i| {
        let (user, page, session) = (rng.next() % ids, rng.next() % 100_000, rng.next());
        let ts = 1_700_000_000_000 + (i / 100) as i64;
        let value = format!(
            "{{\"user\":\"user-{user:06}\",\"page\":\"/products/{page:05}\",\"action\":\"click\",\"ts\":{ts},\"session\":\"{session:016x}\"}}"
        );
        (format!("user-{user:06}"), value, ts)
    }));

    let config = Config::default()
        .with_inputs(["clicks", "users"])
        .with_outputs(["enriched"]);
    let mut runner = Runner::<Enrich>::init(config).expect("enrich starts with its default config");
    for batch in &profiles {
        runner.process_from(1, batch).expect("a table update");
    }
    let mut best = f64::INFINITY;
    let mut bytes = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        bytes = 0;
        for batch in &click_batches {
            let out = runner
                .process_from(0, black_box(batch))
                .expect("a batch of clicks");
            bytes += out.batch.data.len();
        }
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!(
        "enrich per_click: {clicks} clicks, {users} users, {BATCH} per batch: {:.1} ns/click \
         (best of {RUNS}), {:.0} output bytes/click, {} of them through serde_json",
        best * 1e9 / clicks as f64,
        bytes as f64 / clicks as f64,
        runner.operator().parsed_clicks() / RUNS as u64,
    );
}
