//! Long work a user waits for (a rebuild of keyed state from the changelog, a reseed of
//! the changelog from the store): logged every few seconds with entries, bytes and an
//! estimate of the time left, and shown by the status API while it lasts. Process-wide,
//! as the log is: it happens deep in recovery, on reader threads that know only the job,
//! and a process runs one job.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often long work logs how far it is.
const REPORT_EVERY: Duration = Duration::from_secs(3);

static CURRENT: Mutex<Option<Arc<Work>>> = Mutex::new(None);

/// One piece of long work, counted from every thread doing it.
#[derive(Debug)]
pub struct Work {
    what: &'static str,
    started: Instant,
    /// What `done` and `total` count.
    unit: &'static str,
    /// Units expected in all; 0 while unknown.
    total: AtomicU64,
    done: AtomicU64,
    entries: AtomicU64,
    bytes: AtomicU64,
    /// When it last logged, in ms since `started`.
    reported_ms: AtomicU64,
}

/// How far a piece of long work is. The status API shows it as it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// What is being done, e.g. "rebuilding keyed state from the changelog".
    pub what: String,
    /// What `done` and `total` count: "offsets" of the changelog's partitions read past
    /// (records, and the gaps the cleaner left), or "entries".
    pub unit: String,
    pub done: u64,
    /// Expected in all, when known.
    pub total: Option<u64>,
    pub entries: u64,
    pub bytes: u64,
    pub elapsed_ms: u64,
    /// The time left at the rate so far, once there is one.
    pub eta_ms: Option<u64>,
}

/// The work in progress while it lives; dropping it ends the work.
#[must_use = "the work ends when this is dropped"]
pub struct Running(Arc<Work>);

/// Test-only, with the `fault-injection` feature: `WEIR_FAULT=slow-restore:<ms>` pauses
/// a restore that long per record it reads, so a test can watch long work on a small state.
#[cfg(feature = "fault-injection")]
pub(crate) fn pace() {
    static PAUSE: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    let pause = PAUSE.get_or_init(|| {
        let spec = std::env::var("WEIR_FAULT").ok()?;
        let ms = spec.strip_prefix("slow-restore:")?.parse().ok()?;
        Some(Duration::from_millis(ms))
    });
    if let Some(pause) = pause {
        std::thread::sleep(*pause);
    }
}

/// Does nothing: this build has no fault injection.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn pace() {}

/// Begins `what`, counted in `unit`; it is the process's current long work until the
/// returned guard drops.
pub fn begin(what: &'static str, unit: &'static str) -> Running {
    let work = Arc::new(Work {
        what,
        unit,
        started: Instant::now(),
        total: AtomicU64::new(0),
        done: AtomicU64::new(0),
        entries: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        reported_ms: AtomicU64::new(0),
    });
    *CURRENT.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&work));
    Running(work)
}

/// The current long work, if any.
pub fn current() -> Option<Reading> {
    CURRENT.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(|work| work.reading())
}

impl Running {
    pub fn work(&self) -> &Work {
        &self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|work| Arc::ptr_eq(work, &self.0)) {
            *current = None;
        }
    }
}

impl Work {
    /// `units` more are expected in all.
    pub fn add_total(&self, units: u64) {
        self.total.fetch_add(units, Ordering::Relaxed);
    }

    /// Counts work done, and logs how far it is when it last did so [`REPORT_EVERY`] ago.
    /// Callers count in batches: every thread shares these counters.
    pub fn add(&self, units: u64, entries: u64, bytes: u64) {
        self.done.fetch_add(units, Ordering::Relaxed);
        self.entries.fetch_add(entries, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let now_ms = self.started.elapsed().as_millis() as u64;
        let last = self.reported_ms.load(Ordering::Relaxed);
        let due = now_ms >= last + REPORT_EVERY.as_millis() as u64;
        if due && self.reported_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.report();
        }
    }

    fn report(&self) {
        let reading = self.reading();
        let percent = reading.total.map(|total| reading.done.min(total) * 100 / total);
        tracing::info!(
            done = reading.done,
            total = reading.total,
            unit = reading.unit,
            percent,
            entries = reading.entries,
            bytes = reading.bytes,
            elapsed_s = reading.elapsed_ms / 1000,
            eta_s = reading.eta_ms.map(|ms| ms.div_ceil(1000)),
            "{}",
            self.what
        );
    }

    pub fn reading(&self) -> Reading {
        let done = self.done.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let elapsed_ms = self.started.elapsed().as_millis() as u64;
        let eta_ms = (total > 0 && done > 0).then(|| {
            let left = u128::from(total.saturating_sub(done));
            (u128::from(elapsed_ms) * left / u128::from(done)) as u64
        });
        Reading {
            what: self.what.to_owned(),
            unit: self.unit.to_owned(),
            done,
            total: (total > 0).then_some(total),
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            elapsed_ms,
            eta_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_is_current_while_its_guard_lives_and_estimates_the_rest() {
        let running = begin("rebuilding", "offsets");
        running.work().add_total(1000);
        running.work().add(250, 600, 4096);
        let reading = current().expect("current while the guard lives");
        assert_eq!((reading.done, reading.total, reading.entries, reading.bytes), (250, Some(1000), 600, 4096));
        // Three quarters left at the rate of the first quarter: three times the time so far.
        let eta = reading.eta_ms.expect("an estimate once records were read");
        assert!(eta >= reading.elapsed_ms * 3, "{reading:?}");
        drop(running);
        assert_eq!(current(), None);
    }
}
