//! The expected output of each benchmark job, computed from the seeded input, as a
//! multiset of (key, value) pairs; and the exact comparison with what a system wrote.
//! Pairs are held as 128-bit digests (sorted), so 10 M records fit in 160 MB.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use crate::data::{self, Workload};

/// Which job's output to expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// 10 s tumbling count per key (`plugins/window-count`).
    WindowCount,
    /// Input copied unchanged (the transactional copier).
    Copy,
    /// A running total of the `ts` field per key, one record per input record
    /// (`plugins/js-total`, `plugins/py-total`); on keyed input (`--keyed`), so each
    /// key's records reach its operator in one order.
    RunningTotal,
}

pub(crate) const WINDOW_MS: i64 = 10_000;

pub(crate) fn digest(key: &[u8], value: &[u8]) -> u128 {
    let mut h = Sha256::new();
    h.update((key.len() as u32).to_le_bytes());
    h.update(key);
    h.update(value);
    u128::from_le_bytes(h.finalize()[..16].try_into().expect("16 bytes"))
}

/// The sorted digests of the expected output.
pub(crate) fn expected(kind: Kind, workload: &Workload) -> Vec<u128> {
    match kind {
        Kind::Copy => {
            let mut out: Vec<u128> = workload
                .records()
                .map(|r| digest(data::key(r.key).as_bytes(), data::value(&r).as_bytes()))
                .collect();
            for p in 0..workload.partitions {
                out.push(digest(workload.flush_key(p).as_bytes(), data::flush_value(p).as_bytes()));
            }
            out.sort_unstable();
            out
        }
        Kind::RunningTotal => running_totals(workload),
        Kind::WindowCount => {
            let mut counts = WindowCounts::new(WINDOW_MS);
            for r in workload.records() {
                counts.add(r.key, r.ts);
            }
            counts.digests()
        }
    }
}

/// `{"key":"<key>","total":<sum of ts so far>}` for every data record, in production
/// order (a key's order when each key lives in one partition); the flush records carry
/// no `ts` and emit nothing.
fn running_totals(workload: &Workload) -> Vec<u128> {
    assert!(workload.keyed, "a running total's output depends on each key's order: measure it on --keyed input");
    let mut totals: HashMap<u32, i64> = HashMap::new();
    let mut out: Vec<u128> = workload
        .records()
        .map(|r| {
            let total = totals.entry(r.key).or_default();
            *total += r.ts;
            let key = data::key(r.key);
            digest(key.as_bytes(), format!("{{\"key\":\"{key}\",\"total\":{total}}}").as_bytes())
        })
        .collect();
    out.sort_unstable();
    out
}

/// Counts per (key, tumbling window) as `plugins/window-count` computes them when no
/// record is late, and the digests of the records it writes for them.
pub(crate) struct WindowCounts {
    window_ms: i64,
    counts: HashMap<(u32, i64), u64>,
}

impl WindowCounts {
    pub(crate) fn new(window_ms: i64) -> Self {
        Self { window_ms, counts: HashMap::new() }
    }

    pub(crate) fn add(&mut self, key: u32, ts: i64) {
        *self.counts.entry((key, ts.div_euclid(self.window_ms) * self.window_ms)).or_default() += 1;
    }

    /// The sorted digests of the output records.
    pub(crate) fn digests(&self) -> Vec<u128> {
        let mut out: Vec<u128> = self
            .counts
            .iter()
            .map(|(&(key, start), n)| {
                let key = data::key(key);
                let value = format!(
                    "{{\"key\":\"{key}\",\"window_start\":{start},\"window_end\":{},\"count\":{n}}}",
                    start + self.window_ms
                );
                digest(key.as_bytes(), value.as_bytes())
            })
            .collect();
        out.sort_unstable();
        out
    }
}

/// How an output differs from the expected multiset.
#[derive(Debug, Default, serde::Serialize)]
pub(crate) struct Diff {
    pub(crate) expected: usize,
    pub(crate) observed: usize,
    pub(crate) missing: usize,
    pub(crate) unexpected: usize,
}

impl Diff {
    pub(crate) fn exact(&self) -> bool {
        self.missing == 0 && self.unexpected == 0
    }
}

/// Both sorted.
pub(crate) fn compare(expected: &[u128], observed: &[u128]) -> Diff {
    let mut diff = Diff { expected: expected.len(), observed: observed.len(), ..Diff::default() };
    let (mut i, mut j) = (0, 0);
    while i < expected.len() || j < observed.len() {
        match (expected.get(i), observed.get(j)) {
            (Some(e), Some(o)) if e == o => (i, j) = (i + 1, j + 1),
            (Some(e), Some(o)) if e < o => (diff.missing, i) = (diff.missing + 1, i + 1),
            (Some(_), Some(_)) | (None, Some(_)) => (diff.unexpected, j) = (diff.unexpected + 1, j + 1),
            (Some(_), None) => (diff.missing, i) = (diff.missing + 1, i + 1),
            (None, None) => unreachable!(),
        }
    }
    diff
}
