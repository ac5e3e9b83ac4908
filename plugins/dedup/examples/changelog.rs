//! The changelog benchmark's input and its native run: dedup (each id a state entry,
//! timers) against dedup-btree (each key's ids one `BTreeMap` entry), side by side on
//! the same input, a checkpoint after every second of event time. Prints the state
//! entries and bytes (keys and values, as weir counts `state_changes` and the state
//! part of `bytes`) each checkpoint hands over once the ids per key are steady.
//!
//!   cargo run --release -p dedup --example changelog            the native run
//!   cargo run --release -p dedup --example changelog -- --lines the input as `key<TAB>value`
//!       lines, one second of it per second of wall-clock time (bench/dedup feeds them
//!       to Kafka's console producer, whose send time is then each record's event time)
//!
//! Input: 200 keys; per key and second one new id and 3 repeats of ids it had within the
//! horizon (60 s), so each key holds 60 ids and a second changes one in and one out.

use std::io::Write;
use std::time::{Duration, Instant};

use dedup::Dedup;
use dedup_btree::DedupBtree;
use weir_guest::{Config, Error, Operator, Record, Runner};

const KEYS: u64 = 200;
const HORIZON_MS: i64 = 60_000;
const REPEATS: u64 = 3;
/// Seconds before the ids per key are steady, then seconds measured.
const WARM_UP_S: i64 = 60;
const MEASURED_S: i64 = 30;

/// The records of second `second`: (key, value, ms into the second), by time.
fn second(second: i64, rng: &mut u64) -> Vec<(String, String, i64)> {
    let mut records = Vec::new();
    for key in 0..KEYS {
        let offset = (key * 1000 / KEYS) as i64;
        records.push((
            format!("user-{key:03}"),
            format!("{{\"id\":\"order-{second}\"}}"),
            offset,
        ));
        // Ids this key had in the last 59 seconds, all still remembered.
        let known = second.min(HORIZON_MS / 1000 - 1);
        for repeat in 0..REPEATS.min(known as u64) {
            let back = 1 + (next(rng) % known as u64) as i64;
            let value = format!("{{\"id\":\"order-{}\",\"repeat\":{repeat}}}", second - back);
            records.push((format!("user-{key:03}"), value, offset + 1 + repeat as i64));
        }
    }
    records.sort_by_key(|r| r.2);
    records
}

fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Per measured checkpoint: (entries, bytes) handed over.
fn run<O: Operator>(name: &str) -> Result<Vec<(usize, usize)>, Error> {
    let config = Config::from_pairs([("horizon_ms", "60000")]);
    let mut runner = Runner::<O>::init(config)?;
    let mut rng = 7u64;
    let mut passed = 0;
    let mut measured = Vec::new();
    for s in 0..WARM_UP_S + MEASURED_S {
        let records = second(s, &mut rng);
        let start = 1_700_000_000_000 + s * 1000;
        let batch: Vec<Record<'_>> = records
            .iter()
            .map(|(key, value, at)| Record::new(Some(key.as_bytes()), value.as_bytes(), start + at))
            .collect();
        passed += runner.process_records(&batch)?.len();
        runner.on_watermark(start + 999)?;
        let round = runner.changes()?;
        if s >= WARM_UP_S {
            measured.push((round.len(), round.data.len()));
        }
    }
    eprintln!("{name}: {passed} records passed on");
    Ok(measured)
}

fn summary(figures: &[(usize, usize)]) -> String {
    let mut bytes: Vec<usize> = figures.iter().map(|f| f.1).collect();
    bytes.sort_unstable();
    let entries = figures.iter().map(|f| f.0).sum::<usize>() / figures.len();
    let mean = bytes.iter().sum::<usize>() / bytes.len();
    format!(
        "{entries} | {:.1} KB | {:.1} KB | {:.1} KB",
        bytes[bytes.len() / 2] as f64 / 1e3,
        mean as f64 / 1e3,
        bytes[bytes.len() - 1] as f64 / 1e3
    )
}

fn lines() -> std::io::Result<()> {
    let started = Instant::now();
    let mut rng = 7u64;
    let mut out = std::io::stdout().lock();
    for s in 0..WARM_UP_S + MEASURED_S + 5 {
        for (key, value, at) in second(s, &mut rng) {
            let due = Duration::from_millis((s * 1000 + at) as u64);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                out.flush()?;
                std::thread::sleep(wait); // pacing: each record's send time is its event time
            }
            writeln!(out, "{key}\t{value}")?;
        }
    }
    out.flush()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|arg| arg == "--lines") {
        return Ok(lines()?);
    }
    let dedup = run::<Dedup>("dedup")?;
    let btree = run::<DedupBtree>("dedup-btree")?;
    println!(
        "{KEYS} keys of {} ids, one id in and one out per key and checkpoint ({MEASURED_S} checkpoints):",
        HORIZON_MS / 1000
    );
    println!("| variant | state entries per checkpoint | state bytes p50 | mean | max |");
    println!("|---|---:|---:|---:|---:|");
    println!("| dedup (KeyedMap + Timers) | {} |", summary(&dedup));
    println!("| dedup-btree (Keyed<BTreeMap>) | {} |", summary(&btree));
    Ok(())
}
